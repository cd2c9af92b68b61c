/*
 * ty_addr.h - is an IP address public? The rule the server applies before it makes a request
 * to a host a user named (notifications out), so that such a request cannot reach the
 * server's own machine, its network, or a cloud's metadata service (SSRF).
 *
 * An address is public unless it falls in one of these ranges (the class it is refused as):
 *
 *   IPv4  0.0.0.0/8 unspecified; 127.0.0.0/8 loopback; 169.254.0.0/16 link-local (the
 *         metadata service 169.254.169.254 included); 10.0.0.0/8, 172.16.0.0/12,
 *         192.168.0.0/16 private; 100.64.0.0/10 shared (carrier-grade NAT); 224.0.0.0/4
 *         multicast; 255.255.255.255 broadcast; 240.0.0.0/4, 192.0.0.0/24 (IETF protocol
 *         assignments), 198.18.0.0/15 (benchmarking), 192.0.2.0/24, 198.51.100.0/24,
 *         203.0.113.0/24 (documentation) reserved
 *   IPv6  :: unspecified; ::1 loopback; fe80::/10 link-local; fc00::/7 unique local (the
 *         metadata service fd00:ec2::254 included) and fec0::/10 site-local private;
 *         ff00::/8 multicast; 2001:db8::/32, 2001::/23, 100::/64, 64:ff9b:1::/48 and
 *         everything outside 2000::/3 reserved
 *   IPv4 inside IPv6: ::ffff:a.b.c.d (mapped), 64:ff9b::a.b.c.d (NAT64), 2002:AABB:CCDD::/48
 *         (6to4) are classified by their IPv4 address; ::a.b.c.d (IPv4-compatible,
 *         deprecated) is classified by it too, and is reserved when that one is public
 *
 * The numeric shorthands of IPv4 (127.1, 2130706433, 0x7f.1, 017700000001) are not this
 * module's concern: they are text, and getaddrinfo() turns them into the address 127.0.0.1
 * that is classified here. Pure functions: no allocation, no I/O, any thread.
 */
#ifndef TY_ADDR_H
#define TY_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

typedef enum ty_addr_class {
    TY_ADDR_PUBLIC = 0,
    TY_ADDR_UNSPECIFIED,
    TY_ADDR_LOOPBACK,
    TY_ADDR_LINK_LOCAL,
    TY_ADDR_PRIVATE,
    TY_ADDR_SHARED,    /* 100.64.0.0/10, carrier-grade NAT */
    TY_ADDR_MULTICAST,
    TY_ADDR_BROADCAST,
    TY_ADDR_RESERVED,
    TY_ADDR_NOT_IP,    /* neither AF_INET nor AF_INET6, or NULL */
} ty_addr_class;

/* The class of sa (an AF_INET sockaddr_in or AF_INET6 sockaddr_in6; borrowed). */
ty_addr_class ty_addr_classify(const struct sockaddr *sa);
/* 1 when sa is public (ty_addr_classify() is TY_ADDR_PUBLIC), else 0. */
int ty_addr_is_public(const struct sockaddr *sa);
/* "public", "loopback", "link-local", ... (static). */
const char *ty_addr_class_name(ty_addr_class c);
/* The numeric text of sa's address ("127.0.0.1", "::1") into buf, "?" when it cannot be
 * written; returns buf. 64 bytes are always enough. */
char *ty_addr_format(const struct sockaddr *sa, char *buf, size_t len);

#endif
