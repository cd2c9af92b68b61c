/*
 * teams.c - the /v1/teams resource and the one ownership check of every other route.
 *
 *   POST   /v1/teams          admin: {"name", "quota", "borrowing_limit", "weight"}
 *   GET    /v1/teams          every team (admin), or the caller's own
 *   GET    /v1/teams/{name}   one team with its usage; another team's is 404 to a non-admin
 *   PUT    /v1/teams/{name}   admin: replaces quota, borrowing_limit and weight
 *   DELETE /v1/teams/{name}   admin: 409 while it has jobs that have not ended or valid tokens
 *
 * A resource map (quota, borrowing_limit, usage, borrowed) is {"gpu": {"<type>": count},
 * "cpu": "<quantity>", "memory": "<quantity>"} with only the resources it names. On input cpu
 * and memory are Kubernetes quantities ("512", "500m", "4Ti") or numbers (cores, bytes); on
 * output they are always quantity strings: cpu in cores ("512", "0.5"), memory in the largest
 * binary unit that holds it ("4Ti", "1.5Gi", rounded down to hundredths). A team with "quota"
 * null or absent is unlimited. GPU types are the cluster profile's names when the backend
 * names them (ctx->limits.types), any DNS label otherwise.
 *
 * Ownership (api_team_filter()): an admin token sees every team's jobs and sweeps; any other
 * API token only its own team's, and the store applies that filter in SQL (store_job_visible,
 * store_jobs_list's team, store_sweep_visible, store_sweeps_list's team). Another team's job
 * or sweep answers as one that does not exist.
 */
#include "api/api_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/spec.h"
#include "common/ty_quantity.h"
#include "common/ty_time.h"

#define TEAM_MAX_GPU 1000000 /* GPUs of one type in a quota or a limit */

/* ---- ownership ------------------------------------------------------------------ */

const char *api_team_filter(const api_req *req)
{
    const api_principal *p = req->principal;
    if (!p || (p->scopes & STORE_SCOPE_ADMIN))
        return NULL;
    if (p->team)
        return p->team;
    /* A job token owns no team's listing; an API token without a team is the default's. */
    return api_principal_job_id(p) ? "" : STORE_TEAM_DEFAULT;
}

const char *api_principal_team(const api_req *req)
{
    const api_principal *p = req->principal;
    return p && p->team ? p->team : STORE_TEAM_DEFAULT;
}

bool api_need_job_visible(const api_req *req, api_resp *resp, const char *id)
{
    if (!api_is_job_id(id)) {
        api_reply_job_not_found(resp);
        return false;
    }
    ty_err e = store_job_visible(req->ctx->store, id, api_team_filter(req));
    if (e == TY_OK)
        return true;
    if (e == TY_ENOTFOUND)
        api_reply_job_not_found(resp);
    else
        api_reply_error(resp, e, NULL);
    return false;
}

bool api_need_submit_team(const api_req *req, api_resp *resp, json_t *body, const char **team)
{
    json_t *t = json_is_object(body) ? json_object_get(body, "team") : NULL;
    const char *name = json_string_value(t);
    spec_errors errs = {0};
    *team = api_principal_team(req);
    if (!t)
        return true;
    if (spec_errors_init(&errs)) {
        api_reply_error(resp, TY_ENOMEM, NULL);
        return false;
    }
    if (!name || !spec_is_dns_label(name, strlen(name))) {
        spec_errors_add(&errs, "$.team", "must be a team name (a DNS label)");
    } else if (strcmp(name, *team) != 0 &&
               !(req->principal && (req->principal->scopes & STORE_SCOPE_ADMIN))) {
        spec_errors_add(&errs, "$.team", "only an admin token may submit for another team");
    } else {
        store_team *found = NULL;
        ty_err e = store_team_get(req->ctx->store, name, &found);
        store_teams_free(found, found ? 1 : 0);
        if (e == TY_ENOTFOUND) {
            spec_errors_add(&errs, "$.team", "no team has this name");
        } else if (e) {
            spec_errors_free(&errs);
            api_reply_error(resp, e, NULL);
            return false;
        }
    }
    if (errs.count) {
        api_reply_invalid(resp, 422, "invalid-spec", &errs);
        spec_errors_free(&errs);
        return false;
    }
    spec_errors_free(&errs);
    *team = name; /* borrowed from body, which the caller keeps until it stored the jobs */
    return true;
}

/* ---- quantities ------------------------------------------------------------------ */

/* A cpu (scale 3: millicores) or memory (scale 0: bytes) amount: a quantity string or a
 * number >= 0. -1 when v is neither, or too large. */
static int64_t parse_amount(const json_t *v, int scale)
{
    int64_t out = -1;
    if (json_is_string(v)) {
        if (ty_quantity_scaled(json_string_value(v), json_string_length(v), scale, &out) != TY_OK)
            return -1;
        return out;
    }
    if (!json_is_number(v))
        return -1;
    double x = json_number_value(v) * (scale == 3 ? 1000.0 : 1.0);
    if (!isfinite(x) || x < 0 || x >= 9.0e18)
        return -1;
    return (int64_t)ceil(x);
}

/* ---- bodies ---------------------------------------------------------------------- */

typedef struct team_body {
    store_team t;
    store_team_res res[STORE_TEAM_MAX_RESOURCES];
    char names[STORE_TEAM_MAX_RESOURCES][72]; /* "gpu/<type>" */
} team_body;

/* The entry of resource name in b (added when missing), or NULL past the limit. */
static store_team_res *res_entry(team_body *b, const char *name, spec_errors *errs,
                                 const char *path)
{
    for (size_t i = 0; i < b->t.nres; i++)
        if (!strcmp(b->res[i].resource, name))
            return &b->res[i];
    if (b->t.nres == STORE_TEAM_MAX_RESOURCES) {
        spec_errors_add(errs, path, "names too many resources");
        return NULL;
    }
    size_t i = b->t.nres++;
    snprintf(b->names[i], sizeof b->names[i], "%s", name);
    b->res[i] = (store_team_res){.resource = b->names[i], .quota = -1, .borrowing_limit = -1};
    return &b->res[i];
}

static int known_gpu_type(const api_ctx *ctx, const char *type)
{
    if (ctx->limits.ntypes == 0)
        return 1;
    for (size_t i = 0; i < ctx->limits.ntypes; i++)
        if (ctx->limits.types[i].gpu_type && !strcmp(ctx->limits.types[i].gpu_type, type))
            return 1;
    return 0;
}

/* Parses a resource map at path ("$.quota") into b, as the quota (limit 0) or the borrowing
 * limit (limit 1). */
static void parse_map(const api_ctx *ctx, const json_t *map, const char *path, int limit,
                      team_body *b, spec_errors *errs)
{
    char p[160];
    const char *k;
    json_t *v;
    if (!json_is_object(map)) {
        spec_errors_add(errs, path, "must be an object of gpu, cpu and memory");
        return;
    }
    json_object_foreach((json_t *)map, k, v)
    {
        snprintf(p, sizeof p, "%s.%.64s", path, k);
        if (!strcmp(k, "gpu")) {
            const char *type;
            json_t *n;
            if (!json_is_object(v)) {
                spec_errors_add(errs, p, "must be an object of GPU type names and counts");
                continue;
            }
            json_object_foreach(v, type, n)
            {
                char tp[240], res[72];
                snprintf(tp, sizeof tp, "%s.%.64s", p, type);
                if (!spec_is_dns_label(type, strlen(type))) {
                    spec_errors_add(errs, tp, "a GPU type name must be a DNS label");
                    continue;
                }
                if (!known_gpu_type(ctx, type)) {
                    spec_errors_add(errs, tp, "is not a GPU type of this cluster");
                    continue;
                }
                if (!json_is_integer(n) || json_integer_value(n) < 0 ||
                    json_integer_value(n) > TEAM_MAX_GPU) {
                    spec_errors_add(errs, tp, "must be an integer between 0 and 1000000");
                    continue;
                }
                snprintf(res, sizeof res, "gpu/%s", type);
                store_team_res *r = res_entry(b, res, errs, path);
                if (r)
                    *(limit ? &r->borrowing_limit : &r->quota) = json_integer_value(n);
            }
        } else if (!strcmp(k, "cpu") || !strcmp(k, "memory")) {
            int cpu = k[0] == 'c';
            int64_t amount = parse_amount(v, cpu ? 3 : 0);
            if (amount < 0) {
                spec_errors_add(errs, p,
                                cpu ? "must be a quantity of cores (\"512\", \"500m\") or a "
                                      "number >= 0"
                                    : "must be a quantity of bytes (\"4Ti\", \"512Gi\") or a "
                                      "number >= 0");
                continue;
            }
            store_team_res *r = res_entry(b, k, errs, path);
            if (r)
                *(limit ? &r->borrowing_limit : &r->quota) = amount;
        } else {
            spec_errors_add(errs, p, "unknown resource (gpu, cpu, memory)");
        }
    }
}

/* Parses a team body into b (names borrowed from body). With name_from_path (PUT), "name" may
 * be absent or must equal it. */
static void parse_team(const api_ctx *ctx, const json_t *body, const char *name_from_path,
                       team_body *b, spec_errors *errs)
{
    const char *k;
    json_t *v;
    memset(b, 0, sizeof *b);
    b->t.res = b->res;
    b->t.weight = 1;
    if (!json_is_object(body)) {
        spec_errors_add(errs, "$", "must be an object");
        return;
    }
    json_object_foreach((json_t *)body, k, v)
    {
        if (strcmp(k, "name") && strcmp(k, "quota") && strcmp(k, "borrowing_limit") &&
            strcmp(k, "weight") && strcmp(k, "priority_preemption")) {
            char p[96];
            snprintf(p, sizeof p, "$.%.64s", k);
            spec_errors_add(errs, p, "unknown field");
        }
    }
    const json_t *name = json_object_get(body, "name");
    if (name_from_path) {
        b->t.name = (char *)name_from_path;
        if (name && !(json_is_string(name) && !strcmp(json_string_value(name), name_from_path)))
            spec_errors_add(errs, "$.name", "must be the team's name in the path, or absent");
    } else if (!name) {
        spec_errors_add(errs, "$.name", "is required");
    } else if (!json_is_string(name) ||
               !spec_is_dns_label(json_string_value(name), json_string_length(name))) {
        spec_errors_add(errs, "$.name", "must be a DNS label (lower-case letters, digits and "
                                        "'-', at most 63)");
    } else {
        b->t.name = (char *)json_string_value(name);
    }
    const json_t *w = json_object_get(body, "weight");
    if (w && (!json_is_integer(w) || json_integer_value(w) < 1 ||
              json_integer_value(w) > STORE_TEAM_WEIGHT_MAX))
        spec_errors_add(errs, "$.weight", "must be an integer between 1 and 1000");
    else if (w)
        b->t.weight = (int)json_integer_value(w);
    const json_t *pp = json_object_get(body, "priority_preemption");
    if (pp && !json_is_boolean(pp))
        spec_errors_add(errs, "$.priority_preemption", "must be true or false");
    else
        b->t.priority_preemption = json_is_true(pp);
    const json_t *q = json_object_get(body, "quota");
    if (q && !json_is_null(q)) {
        b->t.has_quota = 1;
        parse_map(ctx, q, "$.quota", 0, b, errs);
    }
    const json_t *bl = json_object_get(body, "borrowing_limit");
    if (bl && !json_is_null(bl))
        parse_map(ctx, bl, "$.borrowing_limit", 1, b, errs);
}

/* ---- responses ------------------------------------------------------------------- */

/* Sets map's resource `res` to amount: gpu/<type> under "gpu", cpu and memory as quantities. */
static int map_put(json_t *map, const char *res, int64_t amount)
{
    char q[48];
    if (!strncmp(res, "gpu/", 4)) {
        json_t *gpu = json_object_get(map, "gpu");
        if (!gpu && json_object_set_new(map, "gpu", gpu = json_object()))
            return -1;
        return json_object_set_new(gpu, res + 4, json_integer(amount));
    }
    if (!strcmp(res, "cpu"))
        ty_quantity_format_millis(amount, q, sizeof q);
    else
        ty_quantity_format_bytes(amount, q, sizeof q);
    return json_object_set_new(map, res, json_string(q));
}

static int64_t quota_of(const store_team *t, const char *res)
{
    for (size_t i = 0; i < t->nres; i++)
        if (!strcmp(t->res[i].resource, res))
            return t->res[i].quota < 0 ? 0 : t->res[i].quota;
    return 0; /* a quota that does not name a resource gives none of it */
}

/* The Team resource; usage may be NULL (no usage members). NULL when out of memory. */
static json_t *team_json(const store_team *t, const store_team_usage *u)
{
    char created[32], updated[32];
    json_t *quota = t->has_quota ? json_object() : json_null();
    json_t *limit = json_object();
    int bad = !quota || !limit;
    for (size_t i = 0; !bad && i < t->nres; i++) {
        if (t->has_quota && t->res[i].quota >= 0)
            bad |= map_put(quota, t->res[i].resource, t->res[i].quota) != 0;
        if (t->res[i].borrowing_limit >= 0)
            bad |= map_put(limit, t->res[i].resource, t->res[i].borrowing_limit) != 0;
    }
    ty_time_format_rfc3339(t->created_at_ms, created, sizeof created);
    ty_time_format_rfc3339(t->updated_at_ms, updated, sizeof updated);
    json_t *j = bad ? NULL
                    : json_pack("{s:s, s:i, s:O, s:O, s:b, s:s, s:s}", "name", t->name,
                                "weight", t->weight, "quota", quota, "borrowing_limit", limit,
                                "priority_preemption", t->priority_preemption, "created_at",
                                created, "updated_at", updated);
    json_decref(quota);
    json_decref(limit);
    if (!j || !u)
        return j;
    json_t *usage = json_object(), *borrowed = json_object();
    bad = !usage || !borrowed;
    for (size_t i = 0; !bad && i < u->nuse; i++) {
        bad |= map_put(usage, u->use[i].resource, u->use[i].amount) != 0;
        int64_t over = t->has_quota ? u->use[i].amount - quota_of(t, u->use[i].resource) : 0;
        if (over > 0)
            bad |= map_put(borrowed, u->use[i].resource, over) != 0;
    }
    if (bad) {
        json_decref(usage);
        json_decref(borrowed);
        json_decref(j);
        return NULL;
    }
    /* json_object_set_new() takes the value even when it fails. */
    if (json_object_set_new(j, "usage", usage)) {
        json_decref(borrowed);
        json_decref(j);
        return NULL;
    }
    if (json_object_set_new(j, "borrowed", borrowed) ||
        json_object_set_new(j, "pending", json_integer(u->pending)) ||
        json_object_set_new(j, "admitted", json_integer(u->admitted))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static void reply_team_not_found(api_resp *resp)
{
    api_reply_problem(resp, 404, "team-not-found", NULL, "no team has this name", NULL);
}

/* Replies status with team name as it is now, with its usage. */
static void reply_team(const api_req *req, api_resp *resp, unsigned status, const char *name)
{
    store_team *t = NULL;
    store_team_usage u = {0};
    ty_err e = store_team_get(req->ctx->store, name, &t);
    if (!e)
        e = store_team_usage_get(req->ctx->store, name, &u);
    if (e == TY_ENOTFOUND) {
        reply_team_not_found(resp);
    } else if (e) {
        api_reply_error(resp, e, NULL);
    } else {
        json_t *j = team_json(t, &u);
        if (j)
            api_reply_json(resp, status, j);
        else
            api_reply_error(resp, TY_ENOMEM, NULL);
    }
    store_team_usage_clear(&u);
    store_teams_free(t, t ? 1 : 0);
}

/* ---- handlers -------------------------------------------------------------------- */

static void write_team(const api_req *req, api_resp *resp, int create)
{
    json_t *body = NULL;
    spec_errors errs = {0};
    team_body *b = calloc(1, sizeof *b);
    if (!b || spec_errors_init(&errs)) {
        api_reply_error(resp, TY_ENOMEM, NULL);
        goto out;
    }
    if (!create && !spec_is_dns_label(req->id, strlen(req->id))) {
        reply_team_not_found(resp);
        goto out;
    }
    if (!api_need_json_body(req, resp, &body))
        goto out;
    parse_team(req->ctx, body, create ? NULL : req->id, b, &errs);
    if (errs.count) {
        api_reply_invalid(resp, 422, "invalid-team", &errs);
        goto out;
    }
    ty_err e = create ? store_team_create(req->ctx->store, &b->t)
                      : store_team_update(req->ctx->store, &b->t);
    if (e == TY_EEXISTS) {
        api_reply_problem(resp, 409, "team-exists", NULL, "a team has this name", NULL);
    } else if (e == TY_ENOTFOUND) {
        reply_team_not_found(resp);
    } else if (e) {
        api_reply_error(resp, e, NULL);
    } else {
        reply_team(req, resp, create ? 201 : 200, b->t.name);
        if (create) {
            char location[96];
            snprintf(location, sizeof location, "/v1/teams/%s", b->t.name);
            api_resp_header(resp, "Location", location);
        }
    }
out:
    spec_errors_free(&errs);
    json_decref(body);
    free(b);
}

void api_teams_create(const api_req *req, api_resp *resp)
{
    write_team(req, resp, 1);
}

void api_teams_update(const api_req *req, api_resp *resp)
{
    write_team(req, resp, 0);
}

void api_teams_get(const api_req *req, api_resp *resp)
{
    const char *own = api_team_filter(req);
    if (!spec_is_dns_label(req->id, strlen(req->id)) || (own && strcmp(own, req->id) != 0)) {
        reply_team_not_found(resp);
        return;
    }
    reply_team(req, resp, 200, req->id);
}

void api_teams_list(const api_req *req, api_resp *resp)
{
    store_team *teams = NULL;
    size_t n = 0;
    const char *own = api_team_filter(req);
    json_t *list = json_array();
    ty_err e = list ? store_teams_list(req->ctx->store, &teams, &n) : TY_ENOMEM;
    for (size_t i = 0; !e && i < n; i++) {
        if (own && strcmp(own, teams[i].name) != 0)
            continue;
        store_team_usage u = {0};
        if ((e = store_team_usage_get(req->ctx->store, teams[i].name, &u)))
            break;
        json_t *j = team_json(&teams[i], &u);
        store_team_usage_clear(&u);
        if (!j || json_array_append_new(list, j))
            e = TY_ENOMEM;
    }
    if (e) {
        json_decref(list);
        api_reply_error(resp, e, NULL);
    } else {
        api_reply_json(resp, 200, json_pack("{s:o}", "teams", list));
    }
    store_teams_free(teams, n);
}

void api_teams_delete(const api_req *req, api_resp *resp)
{
    const char *why = NULL;
    if (!spec_is_dns_label(req->id, strlen(req->id))) {
        reply_team_not_found(resp);
        return;
    }
    ty_err e = store_team_delete(req->ctx->store, req->id, &why);
    if (e == TY_ENOTFOUND)
        reply_team_not_found(resp);
    else if (e == TY_ECONFLICT)
        api_reply_problem(resp, 409, "team-in-use", NULL, why ? why : "the team is in use", NULL);
    else if (e)
        api_reply_error(resp, e, NULL);
    else
        resp->status = 204;
}
