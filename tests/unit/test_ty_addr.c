/*
 * Unit tests for common/ty_addr.c: which addresses a notification may be sent to. Every case
 * goes through getaddrinfo(AI_NUMERICHOST) as a URL's host does at registration, so the
 * numeric shorthands of IPv4 (127.1, 2130706433, 0x7f.1, 017700000001), which getaddrinfo
 * accepts as numbers, are checked as the address they become.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "common/ty_addr.h"

static const struct {
    const char *host;
    ty_addr_class cls;
    const char *text; /* what ty_addr_format() writes */
} cases[] = {
    /* IPv4 */
    {"8.8.8.8", TY_ADDR_PUBLIC, "8.8.8.8"},
    {"1.1.1.1", TY_ADDR_PUBLIC, "1.1.1.1"},
    {"93.184.215.14", TY_ADDR_PUBLIC, "93.184.215.14"},
    {"100.63.255.255", TY_ADDR_PUBLIC, "100.63.255.255"},
    {"100.128.0.0", TY_ADDR_PUBLIC, "100.128.0.0"},
    {"172.15.255.255", TY_ADDR_PUBLIC, "172.15.255.255"},
    {"172.32.0.0", TY_ADDR_PUBLIC, "172.32.0.0"},
    {"169.253.255.255", TY_ADDR_PUBLIC, "169.253.255.255"},
    {"223.255.255.255", TY_ADDR_PUBLIC, "223.255.255.255"},
    {"0.0.0.0", TY_ADDR_UNSPECIFIED, "0.0.0.0"},
    {"0.1.2.3", TY_ADDR_UNSPECIFIED, "0.1.2.3"},
    {"127.0.0.1", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"127.255.255.254", TY_ADDR_LOOPBACK, "127.255.255.254"},
    {"169.254.169.254", TY_ADDR_LINK_LOCAL, "169.254.169.254"},
    {"169.254.0.1", TY_ADDR_LINK_LOCAL, "169.254.0.1"},
    {"10.0.0.1", TY_ADDR_PRIVATE, "10.0.0.1"},
    {"172.16.0.1", TY_ADDR_PRIVATE, "172.16.0.1"},
    {"172.31.255.255", TY_ADDR_PRIVATE, "172.31.255.255"},
    {"192.168.1.1", TY_ADDR_PRIVATE, "192.168.1.1"},
    {"100.64.0.1", TY_ADDR_SHARED, "100.64.0.1"},
    {"100.127.255.255", TY_ADDR_SHARED, "100.127.255.255"},
    {"224.0.0.1", TY_ADDR_MULTICAST, "224.0.0.1"},
    {"239.255.255.250", TY_ADDR_MULTICAST, "239.255.255.250"},
    {"255.255.255.255", TY_ADDR_BROADCAST, "255.255.255.255"},
    {"240.0.0.1", TY_ADDR_RESERVED, "240.0.0.1"},
    {"192.0.0.170", TY_ADDR_RESERVED, "192.0.0.170"},
    {"192.0.2.1", TY_ADDR_RESERVED, "192.0.2.1"},
    {"198.18.0.1", TY_ADDR_RESERVED, "198.18.0.1"},
    {"198.51.100.7", TY_ADDR_RESERVED, "198.51.100.7"},
    {"203.0.113.9", TY_ADDR_RESERVED, "203.0.113.9"},
    /* IPv4 numeric shorthands: decimal, hexadecimal, octal, dropped zero octets */
    {"2130706433", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"0x7f.1", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"0x7f000001", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"017700000001", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"0177.0.0.1", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"127.1", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"127.0.1", TY_ADDR_LOOPBACK, "127.0.0.1"},
    {"2852039166", TY_ADDR_LINK_LOCAL, "169.254.169.254"},
    {"0xa9.0xfe.0xa9.0xfe", TY_ADDR_LINK_LOCAL, "169.254.169.254"},
    {"10.1", TY_ADDR_PRIVATE, "10.0.0.1"},
    {"0", TY_ADDR_UNSPECIFIED, "0.0.0.0"},
    {"134744072", TY_ADDR_PUBLIC, "8.8.8.8"},
    /* IPv6 */
    {"2606:4700:4700::1111", TY_ADDR_PUBLIC, "2606:4700:4700::1111"},
    {"2a00:1450:4001::1", TY_ADDR_PUBLIC, "2a00:1450:4001::1"},
    {"::", TY_ADDR_UNSPECIFIED, "::"},
    {"::1", TY_ADDR_LOOPBACK, "::1"},
    {"0:0:0:0:0:0:0:1", TY_ADDR_LOOPBACK, "::1"},
    {"fe80::1", TY_ADDR_LINK_LOCAL, "fe80::1"},
    {"febf::1", TY_ADDR_LINK_LOCAL, "febf::1"},
    {"fec0::1", TY_ADDR_PRIVATE, "fec0::1"},
    {"fd00:ec2::254", TY_ADDR_PRIVATE, "fd00:ec2::254"},
    {"fc00::1", TY_ADDR_PRIVATE, "fc00::1"},
    {"fdff:ffff::1", TY_ADDR_PRIVATE, "fdff:ffff::1"},
    {"ff02::1", TY_ADDR_MULTICAST, "ff02::1"},
    {"ff05::2", TY_ADDR_MULTICAST, "ff05::2"},
    {"2001:db8::1", TY_ADDR_RESERVED, "2001:db8::1"},
    {"2001::1", TY_ADDR_RESERVED, "2001::1"},
    {"100::1", TY_ADDR_RESERVED, "100::1"},
    {"4000::1", TY_ADDR_RESERVED, "4000::1"},
    {"64:ff9b:1::1", TY_ADDR_RESERVED, "64:ff9b:1::1"},
    /* IPv4-mapped */
    {"::ffff:127.0.0.1", TY_ADDR_LOOPBACK, "::ffff:127.0.0.1"},
    {"::ffff:7f00:1", TY_ADDR_LOOPBACK, "::ffff:127.0.0.1"},
    {"::ffff:169.254.169.254", TY_ADDR_LINK_LOCAL, "::ffff:169.254.169.254"},
    {"::ffff:10.0.0.1", TY_ADDR_PRIVATE, "::ffff:10.0.0.1"},
    {"::ffff:100.64.0.1", TY_ADDR_SHARED, "::ffff:100.64.0.1"},
    {"::ffff:0.0.0.0", TY_ADDR_UNSPECIFIED, "::ffff:0.0.0.0"},
    {"::ffff:255.255.255.255", TY_ADDR_BROADCAST, "::ffff:255.255.255.255"},
    {"::ffff:8.8.8.8", TY_ADDR_PUBLIC, "::ffff:8.8.8.8"},
    /* IPv4-compatible (deprecated): never public */
    {"::127.0.0.1", TY_ADDR_LOOPBACK, "::127.0.0.1"},
    {"::169.254.169.254", TY_ADDR_LINK_LOCAL, "::169.254.169.254"},
    {"::192.168.0.1", TY_ADDR_PRIVATE, "::192.168.0.1"},
    {"::8.8.8.8", TY_ADDR_RESERVED, "::8.8.8.8"},
    /* NAT64 well-known prefix */
    {"64:ff9b::127.0.0.1", TY_ADDR_LOOPBACK, "64:ff9b::7f00:1"},
    {"64:ff9b::a9fe:a9fe", TY_ADDR_LINK_LOCAL, "64:ff9b::a9fe:a9fe"},
    {"64:ff9b::10.0.0.1", TY_ADDR_PRIVATE, "64:ff9b::a00:1"},
    {"64:ff9b::8.8.8.8", TY_ADDR_PUBLIC, "64:ff9b::808:808"},
    /* 6to4 */
    {"2002:7f00:1::1", TY_ADDR_LOOPBACK, "2002:7f00:1::1"},
    {"2002:a9fe:a9fe::", TY_ADDR_LINK_LOCAL, "2002:a9fe:a9fe::"},
    {"2002:808:808::1", TY_ADDR_PUBLIC, "2002:808:808::1"},
};

static void test_classify_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICHOST};
        struct addrinfo *ai = NULL;
        int rc = getaddrinfo(cases[i].host, NULL, &hints, &ai);
        if (rc != 0)
            fail_msg("%s: getaddrinfo: %s", cases[i].host, gai_strerror(rc));
        ty_addr_class got = ty_addr_classify(ai->ai_addr);
        char text[64];
        ty_addr_format(ai->ai_addr, text, sizeof text);
        if (got != cases[i].cls || strcmp(text, cases[i].text) != 0)
            fail_msg("%s: got %s (%s), want %s (%s)", cases[i].host, ty_addr_class_name(got), text,
                     ty_addr_class_name(cases[i].cls), cases[i].text);
        assert_int_equal(ty_addr_is_public(ai->ai_addr), cases[i].cls == TY_ADDR_PUBLIC);
        freeaddrinfo(ai);
    }
}

/* The class of an address does not depend on its port, scope or flow label. */
static void test_port_and_scope_ignored(void **state)
{
    (void)state;
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(8080),
                               .sin6_scope_id = 2, .sin6_flowinfo = 7};
    in6.sin6_addr.s6_addr[0] = 0xfe;
    in6.sin6_addr.s6_addr[1] = 0x80;
    in6.sin6_addr.s6_addr[15] = 1;
    assert_int_equal(ty_addr_classify((struct sockaddr *)&in6), TY_ADDR_LINK_LOCAL);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(443)};
    in.sin_addr.s_addr = htonl(0x08080808u);
    assert_true(ty_addr_is_public((struct sockaddr *)&in));
}

/* Anything that is not an IP address is not public. */
static void test_not_ip(void **state)
{
    (void)state;
    struct sockaddr sa = {.sa_family = AF_UNIX};
    char text[64];
    assert_int_equal(ty_addr_classify(&sa), TY_ADDR_NOT_IP);
    assert_false(ty_addr_is_public(&sa));
    assert_false(ty_addr_is_public(NULL));
    assert_string_equal(ty_addr_format(&sa, text, sizeof text), "?");
    assert_string_equal(ty_addr_class_name(TY_ADDR_LOOPBACK), "loopback");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify_table),
        cmocka_unit_test(test_port_and_scope_ignored),
        cmocka_unit_test(test_not_ip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
