/*
 * ty_net.h - small loopback helpers shared by the server side and trainyard-worker.
 *
 * Built as its own libc-only library (ty_net), so that the runtime can use it without
 * linking the server's common code, and the scheduler without linking the runtime's
 * collectives.
 */
#ifndef TY_NET_H
#define TY_NET_H

/*
 * A TCP port on 127.0.0.1 that nothing listens on right now, for a local rank 0's
 * MASTER_PORT (the socket is closed again, so another process may take it before rank
 * 0 binds it); -1 when no socket could be bound.
 */
int ty_net_free_port(void);

#endif
