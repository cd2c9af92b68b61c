/*
 * ty_addr.c - the public-address rule (see ty_addr.h for the ranges). Two tables of
 * prefixes, tried in order; the IPv6 forms that carry an IPv4 address are unwrapped first.
 */
#include "common/ty_addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct v4_range {
    uint32_t net; /* host order */
    unsigned bits;
    ty_addr_class cls;
} v4_range;

static const v4_range v4_ranges[] = {
    {0x00000000u, 8, TY_ADDR_UNSPECIFIED}, /* 0.0.0.0/8 "this network" */
    {0x0a000000u, 8, TY_ADDR_PRIVATE},     /* 10.0.0.0/8 */
    {0x64400000u, 10, TY_ADDR_SHARED},     /* 100.64.0.0/10 */
    {0x7f000000u, 8, TY_ADDR_LOOPBACK},    /* 127.0.0.0/8 */
    {0xa9fe0000u, 16, TY_ADDR_LINK_LOCAL}, /* 169.254.0.0/16 */
    {0xac100000u, 12, TY_ADDR_PRIVATE},    /* 172.16.0.0/12 */
    {0xc0000000u, 24, TY_ADDR_RESERVED},   /* 192.0.0.0/24 IETF protocol assignments */
    {0xc0000200u, 24, TY_ADDR_RESERVED},   /* 192.0.2.0/24 documentation */
    {0xc0a80000u, 16, TY_ADDR_PRIVATE},    /* 192.168.0.0/16 */
    {0xc6120000u, 15, TY_ADDR_RESERVED},   /* 198.18.0.0/15 benchmarking */
    {0xc6336400u, 24, TY_ADDR_RESERVED},   /* 198.51.100.0/24 documentation */
    {0xcb007100u, 24, TY_ADDR_RESERVED},   /* 203.0.113.0/24 documentation */
    {0xe0000000u, 4, TY_ADDR_MULTICAST},   /* 224.0.0.0/4 */
    {0xffffffffu, 32, TY_ADDR_BROADCAST},  /* 255.255.255.255 */
    {0xf0000000u, 4, TY_ADDR_RESERVED},    /* 240.0.0.0/4, after the broadcast address */
};

typedef struct v6_range {
    unsigned char net[16];
    unsigned bits;
    ty_addr_class cls;
} v6_range;

/* Tried after the forms that embed IPv4 and after ::, ::1. */
static const v6_range v6_ranges[] = {
    {{0xfe, 0x80}, 10, TY_ADDR_LINK_LOCAL},
    {{0xfe, 0xc0}, 10, TY_ADDR_PRIVATE}, /* site-local, deprecated */
    {{0xfc}, 7, TY_ADDR_PRIVATE},        /* unique local: fd00:ec2::254 */
    {{0xff}, 8, TY_ADDR_MULTICAST},
    {{0x20, 0x01, 0x0d, 0xb8}, 32, TY_ADDR_RESERVED}, /* documentation */
    {{0x20, 0x01}, 23, TY_ADDR_RESERVED},             /* IETF protocol assignments, Teredo */
};

static int v4_in(uint32_t a, uint32_t net, unsigned bits)
{
    uint32_t mask = bits == 0 ? 0 : 0xffffffffu << (32 - bits);
    return (a & mask) == (net & mask);
}

static int v6_in(const unsigned char *a, const unsigned char *net, unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;
    if (memcmp(a, net, whole) != 0)
        return 0;
    if (!rest)
        return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[whole] & mask) == (net[whole] & mask);
}

static ty_addr_class classify_v4(uint32_t a)
{
    for (size_t i = 0; i < sizeof v4_ranges / sizeof v4_ranges[0]; i++)
        if (v4_in(a, v4_ranges[i].net, v4_ranges[i].bits))
            return v4_ranges[i].cls;
    return TY_ADDR_PUBLIC;
}

static uint32_t v4_at(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static ty_addr_class classify_v6(const unsigned char *a)
{
    static const unsigned char zero[16] = {0};
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char nat64[12] = {0x00, 0x64, 0xff, 0x9b};
    static const unsigned char nat64_local[6] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};
    static const unsigned char discard[8] = {0x01, 0x00};

    if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
        return classify_v4(v4_at(a + 12));
    if (memcmp(a, zero, 12) == 0) { /* ::, ::1, or ::a.b.c.d (IPv4-compatible) */
        if (memcmp(a + 12, "\0\0\0\0", 4) == 0)
            return TY_ADDR_UNSPECIFIED;
        if (memcmp(a + 12, "\0\0\0\1", 4) == 0)
            return TY_ADDR_LOOPBACK;
        ty_addr_class c = classify_v4(v4_at(a + 12));
        return c == TY_ADDR_PUBLIC ? TY_ADDR_RESERVED : c;
    }
    if (a[0] == 0x20 && a[1] == 0x02) /* 6to4: the IPv4 address in bits 16..47 */
        return classify_v4(v4_at(a + 2));
    if (memcmp(a, nat64_local, 6) == 0 || memcmp(a, discard, 8) == 0)
        return TY_ADDR_RESERVED;
    for (size_t i = 0; i < sizeof v6_ranges / sizeof v6_ranges[0]; i++)
        if (v6_in(a, v6_ranges[i].net, v6_ranges[i].bits))
            return v6_ranges[i].cls;
    if ((a[0] & 0xe0) != 0x20) /* outside 2000::/3, global unicast */
        return TY_ADDR_RESERVED;
    return TY_ADDR_PUBLIC;
}

ty_addr_class ty_addr_classify(const struct sockaddr *sa)
{
    if (!sa)
        return TY_ADDR_NOT_IP;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof in); /* sa may be any sockaddr buffer: no aliasing */
        return classify_v4(ntohl(in.sin_addr.s_addr));
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof in6);
        return classify_v6(in6.sin6_addr.s6_addr);
    }
    return TY_ADDR_NOT_IP;
}

int ty_addr_is_public(const struct sockaddr *sa)
{
    return ty_addr_classify(sa) == TY_ADDR_PUBLIC;
}

const char *ty_addr_class_name(ty_addr_class c)
{
    static const char *const names[] = {
        [TY_ADDR_PUBLIC] = "public",
        [TY_ADDR_UNSPECIFIED] = "unspecified",
        [TY_ADDR_LOOPBACK] = "loopback",
        [TY_ADDR_LINK_LOCAL] = "link-local",
        [TY_ADDR_PRIVATE] = "private",
        [TY_ADDR_SHARED] = "shared (carrier-grade NAT)",
        [TY_ADDR_MULTICAST] = "multicast",
        [TY_ADDR_BROADCAST] = "broadcast",
        [TY_ADDR_RESERVED] = "reserved",
        [TY_ADDR_NOT_IP] = "not an IP address",
    };
    return (unsigned)c < sizeof names / sizeof names[0] ? names[c] : "unknown";
}

char *ty_addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
    if (!buf || !len)
        return buf;
    const void *a = NULL;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
    if (sa && sa->sa_family == AF_INET) {
        memcpy(&in, sa, sizeof in);
        a = &in.sin_addr;
    } else if (sa && sa->sa_family == AF_INET6) {
        memcpy(&in6, sa, sizeof in6);
        a = &in6.sin6_addr;
    }
    if (!a || !inet_ntop(sa->sa_family, a, buf, (socklen_t)len))
        snprintf(buf, len, "?");
    return buf;
}
