/* tfdist bind shim: make TensorFlow's gRPC servers listen on one address, not on all of them.
 *
 * TensorFlow's tf.distribute.Server always binds "[::]:PORT" (every interface), whatever host the
 * cluster spec names, and the gRPC runtime has no authentication. Loaded with LD_PRELOAD, this
 * wraps bind(2): a bind to the wildcard address on a port listed in TFDIST_BIND_PORTS becomes a
 * bind to TFDIST_BIND_ADDRESS (an IPv4 address; on an IPv6 socket its v4-mapped form). Every
 * other bind passes through unchanged. A malformed TFDIST_BIND_PORTS fails closed: every wildcard
 * bind fails with EACCES (and one line on stderr says why), so no server ends up on every
 * interface by mistake. Built by tfdist/launch/bind.py; used by `tfdist launch`.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

/* 1 if `port` is in `list` ("PORT[,PORT...]", each 1-65535); 0 if not; -1 if `list` is malformed. */
static int port_in(const char *list, unsigned short port) {
    int found = 0;
    for (const char *s = list;; s++) {
        long value = 0;
        int digits = 0;
        for (; *s >= '0' && *s <= '9'; s++)
            if (++digits > 5) return -1;
            else value = value * 10 + (*s - '0');
        if (digits == 0 || value < 1 || value > 65535) return -1;
        if (value == port) found = 1;
        if (*s == 0) return found;
        if (*s != ',') return -1;
    }
}

/* Whether a wildcard bind to `port` is rewritten (1), left alone (0), or refused (-1: a malformed
 * TFDIST_BIND_PORTS, reported once on stderr; read as port 0 it would catch every ephemeral bind). */
static int port_listed(unsigned short port) {
    static volatile int warned;
    const char *ports = getenv("TFDIST_BIND_PORTS");
    if (!ports) return 0;
    int listed = port_in(ports, port);
    if (listed < 0) {
        if (!__sync_lock_test_and_set(&warned, 1))
            fprintf(stderr, "tfdist bind shim: error: TFDIST_BIND_PORTS=\"%.100s\" is not a comma-separated "
                    "list of ports 1-65535, so every bind to all interfaces is refused (EACCES); "
                    "fix: set it to e.g. \"2222\" or \"2222,2223\" (tfdist launch does)\n", ports);
    }
    return listed;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *host = getenv("TFDIST_BIND_ADDRESS");
    struct in_addr v4;
    if (host && addr && inet_pton(AF_INET, host, &v4) == 1) {
        if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
            struct sockaddr_in a; memcpy(&a, addr, sizeof a);
            int listed = a.sin_addr.s_addr == htonl(INADDR_ANY) ? port_listed(ntohs(a.sin_port)) : 0;
            if (listed < 0) { errno = EACCES; return -1; }
            if (listed) {
                a.sin_addr = v4;
                return real_bind(fd, (struct sockaddr *)&a, sizeof a);
            }
        } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
            struct sockaddr_in6 a; memcpy(&a, addr, sizeof a);
            int listed = memcmp(&a.sin6_addr, &in6addr_any, sizeof in6addr_any) == 0
                         ? port_listed(ntohs(a.sin6_port)) : 0;
            if (listed < 0) { errno = EACCES; return -1; }
            if (listed) {
                memset(&a.sin6_addr, 0, sizeof a.sin6_addr);
                a.sin6_addr.s6_addr[10] = 0xff; a.sin6_addr.s6_addr[11] = 0xff;
                memcpy(&a.sin6_addr.s6_addr[12], &v4, 4);
                return real_bind(fd, (struct sockaddr *)&a, sizeof a);
            }
        }
    }
    return real_bind(fd, addr, len);
}
