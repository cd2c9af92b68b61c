/*
 * test_rendezvous.c - strangers at a gang's rendezvous cost it nothing, end to end: the
 * real `trainyard serve` (local backend, ranks sandboxed as in production) runs a 2-rank
 * `trainyard-worker train` job whose rank 1, before it starts its worker, plays two
 * strangers against rank 0's MASTER_PORT while rank 0 waits for it: a connection that
 * sends an HTTP request and waits to be closed, then a trainyard-worker that speaks the
 * protocol with another world size and a secret that is not the gang's. Both are refused,
 * and the job SUCCEEDS in its first attempt; its ranks held the secret the server minted
 * (no warning that anything may join).
 *
 * Usage: test_rendezvous TRAINYARD_BINARY OPENAPI_YAML (CTest passes both). Deadlines
 * only bound a hang; nothing asserts how long anything took. Where the machine cannot
 * sandbox jobs, or has no bash for /dev/tcp, the case skips, saying why.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/runtime/rt_testdata.h"
#include "tests/support/ty_harness.h"

#define DEADLINE_MS 180000 /* for the job to end */
#define N_TRAIN 1024
#define N_TEST 128

/* GET path, expecting 200; the body (new). */
static json_t *get_json(ty_client *c, const char *path)
{
    ty_http_resp *r = ty_req(c, "GET", path, NULL);
    if (r->status != 200)
        fail_msg("GET %s: HTTP %ld: %.400s", path, r->status, r->body);
    json_t *j = json_incref(r->json);
    assert_non_null(j);
    ty_resp_destroy(r);
    return j;
}

/* The rank's log (new text). */
static char *rank_log(ty_client *c, const char *id, int rank)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/logs?rank=%d", id, rank);
    ty_http_resp *r = ty_req(c, "GET", path, NULL);
    char *text = strdup(r->status == 200 && r->body ? r->body : "");
    assert_non_null(text);
    ty_resp_destroy(r);
    return text;
}

/* Polls the job until it ends; returns it (new). */
static json_t *wait_end(ty_client *c, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    int64_t deadline = ty_now_ms() + DEADLINE_MS;
    for (;;) {
        json_t *job = get_json(c, path);
        const char *state = ty_json_str(job, "state");
        if (state && (strcmp(state, "SUCCEEDED") == 0 || strcmp(state, "FAILED") == 0 ||
                      strcmp(state, "CANCELLED") == 0))
            return job;
        json_decref(job);
        if (ty_now_ms() > deadline)
            fail_msg("job %s did not end", id);
        ty_sleep_ms(100);
    }
}

/*
 * Rank 1 first waits for rank 0's port, then connects, sends an HTTP request and reads
 * until rank 0 closes (its challenge, then nothing: it gives up on a silent stranger);
 * then an impostor, trainyard-worker with WORLD_SIZE=3 and a wrong secret, tries to
 * register and must be refused. Only then does the real rank 1 start. Rank 0 waits for
 * it all along, within its rendezvous timeout.
 */
static const char script[] =
    "train() { trainyard-worker train --data \"$TRAINYARD_DATA_DIR/rdv\" --epochs 1 "
    "--batch 128 --threads 1 \"$@\"; }\n"
    "if [ \"$RANK\" = 1 ]; then\n"
    "  until (exec 3<>\"/dev/tcp/$MASTER_ADDR/$MASTER_PORT\") 2>/dev/null; do sleep 0.1; done\n"
    "  exec 3<>\"/dev/tcp/$MASTER_ADDR/$MASTER_PORT\"\n"
    "  printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' >&3\n"
    "  cat <&3 >/dev/null\n"
    "  exec 3<&-\n"
    "  echo 'stranger: closed by rank 0' >&2\n"
    "  if TRAINYARD_RENDEZVOUS_SECRET=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    " WORLD_SIZE=3 train --timeout 5 2>\"$TRAINYARD_OUTPUT_DIR/impostor.log\"; then\n"
    "    echo 'impostor: joined' >&2; exit 97\n"
    "  fi\n"
    "  sed 's/^/impostor: /' \"$TRAINYARD_OUTPUT_DIR/impostor.log\" >&2\n"
    "fi\n"
    "train\n";

static void test_strangers_at_rendezvous_cost_nothing(void **state)
{
    (void)state;
    char err[2048];
    if (access("/bin/bash", X_OK) != 0) {
        print_message("skipped: no /bin/bash for the stranger's /dev/tcp\n");
        skip();
    }
    ty_server *srv = NULL;
    if (ty_server_start(NULL, &srv, err, sizeof err) < 0) {
        if (strstr(err, "local sandbox:")) {
            print_message("skipped: this machine cannot sandbox jobs: %s\n",
                          strstr(err, "local sandbox:"));
            ty_server_free(srv);
            skip();
        }
        fail_msg("%s", err);
    }
    char data[4096];
    snprintf(data, sizeof data, "%s/datasets/rdv", ty_server_dir(srv));
    assert_int_equal(mkdir(data, 0755), 0);
    assert_int_equal(rt_write_dataset(data, N_TRAIN, N_TEST, 5), 0);
    ty_client *c = ty_client_new(srv, TY_TEST_ADMIN_TOKEN);
    assert_non_null(c);

    /* One restart allowed: a rendezvous the strangers failed would show as attempt 2. */
    json_t *spec = json_pack("{s:s, s:[s,s,s], s:{s:i}, s:{s:i, s:i}}", "name", "rendezvous",
                             "command", "bash", "-c", script, "workers", "count", 2, "restart",
                             "max", 1, "backoff_seconds", 0);
    char *body = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    ty_http_resp *r = ty_req(c, "POST", "/v1/jobs", body);
    free(body);
    if (r->status != 201)
        fail_msg("submit: HTTP %ld: %.400s", r->status, r->body);
    char id[64];
    snprintf(id, sizeof id, "%s", ty_json_str(r->json, "id"));
    ty_resp_destroy(r);

    json_t *job = wait_end(c, id);
    char *log0 = rank_log(c, id, 0), *log1 = rank_log(c, id, 1);
    const char *st = ty_json_str(job, "state");
    if (!st || strcmp(st, "SUCCEEDED") != 0 ||
        json_integer_value(json_object_get(job, "attempt")) != 1)
        fail_msg("job %s is %s in attempt %lld; rank 0:\n%.3000s\nrank 1:\n%.3000s", id,
                 st ? st : "?", (long long)json_integer_value(json_object_get(job, "attempt")),
                 log0, log1);
    assert_int_equal(json_integer_value(json_object_get(job, "restarts")), 0);
    /* Both strangers met rank 0, and were shown the door. */
    if (!strstr(log1, "stranger: closed by rank 0") || !strstr(log1, "refused our proof"))
        fail_msg("rank 1 did not see both strangers refused:\n%.3000s", log1);
    /* The ranks had the server's secret: neither warned that anything may join. */
    assert_null(strstr(log0, "TRAINYARD_RENDEZVOUS_SECRET is not set"));
    assert_null(strstr(log1, "TRAINYARD_RENDEZVOUS_SECRET is not set"));
    free(log0);
    free(log1);
    json_decref(job);

    int wstatus = 0;
    if (ty_server_stop(srv, 30000, &wstatus, err, sizeof err) < 0)
        fail_msg("%s", err);
    assert_int_equal(wstatus, 0);
    ty_client_free(c);
    ty_server_free(srv);
}

int main(int argc, char **argv)
{
    char err[512];
    if (ty_harness_init(argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "test_rendezvous: %s\n", err);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strangers_at_rendezvous_cost_nothing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ty_harness_cleanup();
    return rc;
}
