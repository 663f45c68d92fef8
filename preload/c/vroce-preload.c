/*
 * vroce-preload: the LD_PRELOAD interposer vroce-run puts into unmodified
 * programs. It hands a TCP socket the program connects or listens on to
 * vroced over an abstract control socket ($VROCED_ADDR) and, when the peer
 * speaks vRoCE, puts a socketpair end bridged to an rsock stream in place
 * of the program's descriptor (dup3). Everything else stays the program's
 * real kernel socket, so epoll, poll, non-blocking I/O, fork, dup,
 * shutdown and sendfile need no interposition. The wire format is
 * preload/protocol.go's.
 *
 * No Go runtime in here: it would not survive the program's fork. Real
 * calls come from dlsym(RTLD_NEXT); the control socket is driven with raw
 * syscalls. Nothing here blocks in a signal handler: only connect,
 * listen, and the socket options and names of a swapped descriptor
 * (a pending connect's outcome, SO_LINGER, TCP_INFO) talk to the
 * daemon, and only outside them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#define MAGIC 0x31447276u /* "vrD1" */
#define MSG_SIZE 64
#define ADDR_SIZE 24
#define ACCEPT_SIZE (4 + 2 * ADDR_SIZE)
#define OP_HELLO 1
#define OP_CONNECT 2
#define OP_LISTEN 3
#define OP_RESULT 5
#define OP_LINGER0 6
#define OP_INFO 7
#define INFO_SIZE (6 * 4 + 2 * 8)
#define FLAG_SWAP 1
#define FLAG_ASYNC 2
#define MAX_FDS 65536

/* What the interposer knows of a descriptor it swapped. */
enum kind { K_NONE, K_STREAM, K_LISTENER, K_PENDING };
struct fdinfo {
	unsigned char kind;
	uint32_t id; /* K_PENDING: the connect's ID at the daemon */
	pid_t owner; /* K_LISTENER: the process that listened */
	int nodelay;
	struct sockaddr_storage local, peer;
	socklen_t llen, plen;
};

/* An epoll registration the program made, to restore around dup3. */
struct reg {
	int epfd, fd;
	struct epoll_event ev;
};

/* Two locks, never held together. ctlmu is held across a round trip to
 * the daemon, which for a blocking connect lasts the whole dial; mu only
 * over the table's updates, so that one thread's connect does not stop
 * every other thread's close, dup or epoll_ctl while it dials. */
static struct {
	pthread_mutex_t ctlmu; /* guards ctl and pid, and pairs a request with its reply */
	pthread_mutex_t mu;    /* guards fds and regs */
	char addr[108];
	socklen_t addrlen;
	int enabled, nofallback;
	int ctl;   /* the control socket, -1 when none; read unlocked by close and dup */
	pid_t pid; /* the process ctl belongs to: a child dials its own */
	struct fdinfo *fds;
	struct reg *regs;
	int nregs, capregs;
} st = {.ctlmu = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER, .ctl = -1};

static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static int (*real_listen)(int, int);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*real_getsockname)(int, struct sockaddr *, socklen_t *);
static int (*real_getpeername)(int, struct sockaddr *, socklen_t *);
static int (*real_getsockopt)(int, int, int, void *, socklen_t *);
static int (*real_setsockopt)(int, int, int, const void *, socklen_t);
static int (*real_close)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static int (*real_epoll_ctl)(int, int, int, struct epoll_event *);

static void put32(unsigned char *b, uint32_t v) { memcpy(b, &v, 4); }
static uint32_t get32(const unsigned char *b) { uint32_t v; memcpy(&v, b, 4); return v; }

static void resolve(void) {
	real_connect = dlsym(RTLD_NEXT, "connect");
	real_listen = dlsym(RTLD_NEXT, "listen");
	real_accept4 = dlsym(RTLD_NEXT, "accept4");
	real_getsockname = dlsym(RTLD_NEXT, "getsockname");
	real_getpeername = dlsym(RTLD_NEXT, "getpeername");
	real_getsockopt = dlsym(RTLD_NEXT, "getsockopt");
	real_setsockopt = dlsym(RTLD_NEXT, "setsockopt");
	real_close = dlsym(RTLD_NEXT, "close");
	real_dup2 = dlsym(RTLD_NEXT, "dup2");
	real_dup3 = dlsym(RTLD_NEXT, "dup3");
	real_epoll_ctl = dlsym(RTLD_NEXT, "epoll_ctl");
}

/* need resolves the real calls for a call that comes before init (from
 * another library's constructor). */
static inline void need(void) {
	if (real_epoll_ctl == NULL)
		resolve();
}

static struct fdinfo *info(int fd) {
	if (fd < 0 || fd >= MAX_FDS || st.fds == NULL)
		return NULL;
	return &st.fds[fd];
}

/* Writes a sockaddr as the protocol's addr. */
static void put_addr(unsigned char *b, const struct sockaddr *sa) {
	memset(b, 0, ADDR_SIZE);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		uint16_t fam = AF_INET, port = ntohs(in->sin_port);
		memcpy(b, &fam, 2);
		memcpy(b + 2, &port, 2);
		memcpy(b + 8, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		uint16_t fam = AF_INET6, port = ntohs(in6->sin6_port);
		uint32_t scope = in6->sin6_scope_id;
		memcpy(b, &fam, 2);
		memcpy(b + 2, &port, 2);
		memcpy(b + 4, &scope, 4);
		memcpy(b + 8, &in6->sin6_addr, 16);
	}
}

/* Reads the protocol's addr as a sockaddr; 0 length for none. */
static socklen_t get_addr(const unsigned char *b, struct sockaddr_storage *ss) {
	uint16_t fam, port;
	memcpy(&fam, b, 2);
	memcpy(&port, b + 2, 2);
	memset(ss, 0, sizeof *ss);
	if (fam == AF_INET) {
		struct sockaddr_in *in = (void *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		memcpy(&in->sin_addr, b + 8, 4);
		return sizeof *in;
	}
	if (fam == AF_INET6) {
		struct sockaddr_in6 *in6 = (void *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		memcpy(&in6->sin6_scope_id, b + 4, 4);
		memcpy(&in6->sin6_addr, b + 8, 16);
		return sizeof *in6;
	}
	return 0;
}

/* The control socket of this process, dialled on first use (and again in
 * a child after fork). Called with st.ctlmu held. */
static int control(void) {
	pid_t pid = (pid_t)syscall(SYS_getpid);
	if (st.ctl >= 0 && st.pid == pid)
		return st.ctl;
	if (st.ctl >= 0) /* the parent's: leave it to the parent */
		__atomic_store_n(&st.ctl, -1, __ATOMIC_RELAXED);
	int s = (int)syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct sockaddr_un un;
	memset(&un, 0, sizeof un);
	un.sun_family = AF_UNIX;
	memcpy(un.sun_path, st.addr, st.addrlen);
	if (syscall(SYS_connect, s, &un, offsetof(struct sockaddr_un, sun_path) + st.addrlen) < 0) {
		syscall(SYS_close, s);
		return -1;
	}
	__atomic_store_n(&st.ctl, s, __ATOMIC_RELAXED);
	st.pid = pid;
	unsigned char m[MSG_SIZE];
	memset(m, 0, sizeof m);
	put32(m, MAGIC);
	put32(m + 4, OP_HELLO);
	put32(m + 12, (uint32_t)pid);
	syscall(SYS_sendto, s, m, sizeof m, MSG_NOSIGNAL, NULL, 0);
	return s;
}

/* recv_fd receives one message of at most len bytes and the descriptor
 * it carries into *got (-1: none). Returns recvmsg's result. */
static long recv_fd(int s, void *buf, size_t len, int flags, int *got) {
	struct iovec iov = {buf, len};
	union { struct cmsghdr h; char c[CMSG_SPACE(sizeof(int))]; } u;
	struct msghdr mh;
	memset(&mh, 0, sizeof mh);
	memset(&u, 0, sizeof u);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.c;
	mh.msg_controllen = sizeof u.c;
	*got = -1;
	long n = syscall(SYS_recvmsg, s, &mh, flags);
	if (n < 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(got, CMSG_DATA(c), sizeof(int));
	return n;
}

/* One request and its reply of rlen bytes, with at most one descriptor
 * each way. Returns the reply length, or -1 when the daemon is
 * unreachable. Called with st.ctlmu held (ask). */
static int request_n(unsigned char *m, int give, unsigned char *reply, size_t rlen, int *got) {
	*got = -1;
	int s = control();
	if (s < 0)
		return -1;
	struct iovec iov = {m, MSG_SIZE};
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } u;
	struct msghdr mh;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (give >= 0) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.b;
		mh.msg_controllen = sizeof u.b;
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &give, sizeof(int));
	}
	long n;
	do
		n = syscall(SYS_sendmsg, s, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		goto gone;
	do
		n = recv_fd(s, reply, rlen, MSG_CMSG_CLOEXEC, got);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		goto gone;
	if ((size_t)n != rlen || get32(reply) != MAGIC || get32(reply + 4) != get32(m + 4)) {
		if (*got >= 0)
			syscall(SYS_close, *got);
		*got = -1;
		goto gone;
	}
	return (int)n;
gone:
	syscall(SYS_close, s);
	__atomic_store_n(&st.ctl, -1, __ATOMIC_RELAXED);
	return -1;
}

/* ask is request_n under st.ctlmu: one round trip at a time on the
 * control socket, whatever else the process does meanwhile. */
static int ask_n(unsigned char *m, int give, unsigned char *reply, size_t rlen, int *got) {
	pthread_mutex_lock(&st.ctlmu);
	int n = request_n(m, give, reply, rlen, got);
	pthread_mutex_unlock(&st.ctlmu);
	return n;
}

static int ask(unsigned char *m, int give, unsigned char *reply, int *got) {
	return ask_n(m, give, reply, MSG_SIZE, got);
}

/* stream_op asks the daemon something of the stream with ID id; the
 * reply's extra bytes go to extra. Returns its errno. */
static int stream_op(uint32_t op, uint32_t id, unsigned char *extra, size_t nextra) {
	unsigned char m[MSG_SIZE], r[MSG_SIZE + INFO_SIZE];
	memset(m, 0, sizeof m);
	put32(m, MAGIC);
	put32(m + 4, op);
	put32(m + 12, id);
	int nfd;
	int n = ask_n(m, -1, r, MSG_SIZE + nextra, &nfd);
	if (nfd >= 0)
		syscall(SYS_close, nfd);
	if (n < 0)
		return ENOTCONN;
	int err = (int)get32(r + 8);
	if (err == 0 && extra)
		memcpy(extra, r + MSG_SIZE, nextra);
	return err;
}

/* A TCP socket of the internet families, which the daemon may take. */
static int is_tcp(int fd) {
	int v;
	socklen_t l = sizeof v;
	if (real_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_STREAM)
		return 0;
	l = sizeof v;
	if (real_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return 0;
	l = sizeof v;
	if (real_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || (v != AF_INET && v != AF_INET6))
		return 0;
	return 1;
}

/* Puts nfd in place of fd, keeping fd's file status and close-on-exec
 * flags and its epoll registrations (dup3 over a registered descriptor
 * drops them silently). Called with st.mu held. */
static int swap_in(int fd, int nfd, int flflags, int fdflags) {
	fcntl(nfd, F_SETFL, flflags & O_NONBLOCK ? O_NONBLOCK : 0);
	for (int i = 0; i < st.nregs; i++)
		if (st.regs[i].fd == fd)
			real_epoll_ctl(st.regs[i].epfd, EPOLL_CTL_DEL, fd, NULL);
	int rc = real_dup3(nfd, fd, fdflags & FD_CLOEXEC ? O_CLOEXEC : 0);
	int e = errno;
	syscall(SYS_close, nfd);
	for (int i = 0; i < st.nregs; i++)
		if (st.regs[i].fd == fd)
			real_epoll_ctl(st.regs[i].epfd, EPOLL_CTL_ADD, fd, &st.regs[i].ev);
	errno = e;
	return rc;
}

static void ensure_table(void) {
	if (st.fds == NULL)
		st.fds = calloc(MAX_FDS, sizeof *st.fds);
}

/* Around a fork, so that the child inherits no lock another thread held:
 * mu, held only over table updates, is taken for the fork itself; ctlmu,
 * which a thread may hold for a whole dial, is made anew in the child,
 * which dials a control socket of its own on first use anyway. */
static void fork_prepare(void) { pthread_mutex_lock(&st.mu); }
static void fork_parent(void) { pthread_mutex_unlock(&st.mu); }
static void fork_child(void) {
	pthread_mutex_unlock(&st.mu);
	pthread_mutex_init(&st.ctlmu, NULL);
}

__attribute__((constructor)) static void init(void) {
	resolve();
	const char *a = getenv("VROCED_ADDR");
	if (a == NULL || a[0] != '@' || strlen(a) > sizeof st.addr)
		return;
	/* An abstract address: a NUL, then the name. */
	st.addr[0] = 0;
	memcpy(st.addr + 1, a + 1, strlen(a) - 1);
	st.addrlen = (socklen_t)strlen(a);
	st.nofallback = getenv("VROCE_NO_FALLBACK") != NULL;
	st.enabled = 1;
	pthread_mutex_lock(&st.mu);
	ensure_table();
	pthread_mutex_unlock(&st.mu);
	pthread_mutex_lock(&st.ctlmu);
	control(); /* hello: vroce-run can tell the program was interposed */
	pthread_mutex_unlock(&st.ctlmu);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* settled waits for the outcome of the non-blocking connect fd is
 * waiting for, if one is, and returns its errno (0: connected, or none
 * pending); fd is then a stream (whose placeholder the daemon closed if
 * it failed). The wait holds no lock on the table. */
static int settled(int fd) {
	struct fdinfo *fi = info(fd);
	if (fi == NULL || fi->kind != K_PENDING)
		return 0;
	pthread_mutex_lock(&st.mu);
	int pending = fi->kind == K_PENDING;
	uint32_t id = fi->id;
	pthread_mutex_unlock(&st.mu);
	if (!pending)
		return 0;
	unsigned char m[MSG_SIZE], r[MSG_SIZE];
	memset(m, 0, sizeof m);
	put32(m, MAGIC);
	put32(m + 4, OP_RESULT);
	put32(m + 12, id);
	int nfd, err;
	if (ask(m, -1, r, &nfd) < 0)
		err = ECONNABORTED; /* the daemon is gone, and the bridge with it */
	else
		err = (int)get32(r + 8);
	if (nfd >= 0)
		syscall(SYS_close, nfd);
	pthread_mutex_lock(&st.mu);
	if (fi->kind == K_PENDING && fi->id == id) { /* not settled by another thread meanwhile */
		fi->kind = K_STREAM;
		fi->llen = fi->plen = 0;
		if (err == 0 && (r[16] | r[17])) {
			fi->llen = get_addr(r + 16, &fi->local);
			fi->plen = get_addr(r + 40, &fi->peer);
		}
	}
	pthread_mutex_unlock(&st.mu);
	return err;
}

int connect(int fd, const struct sockaddr *sa, socklen_t len) {
	need();
	struct fdinfo *ci = info(fd);
	if (st.enabled && ci && ci->kind == K_PENDING) {
		/* Asked again while in progress: the outcome, as the kernel
		 * would give it once known. */
		int err = settled(fd);
		errno = err ? err : EISCONN;
		return -1;
	}
	if (st.enabled && ci && ci->kind == K_STREAM) {
		errno = EISCONN;
		return -1;
	}
	if (!st.enabled || sa == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) || !is_tcp(fd))
		return real_connect(fd, sa, len);
	int flflags = fcntl(fd, F_GETFL), fdflags = fcntl(fd, F_GETFD);
	int async = (flflags & O_NONBLOCK) != 0;
	unsigned char m[MSG_SIZE], r[MSG_SIZE];
	memset(m, 0, sizeof m);
	put32(m, MAGIC);
	put32(m + 4, OP_CONNECT);
	put32(m + 12, async ? FLAG_ASYNC : 0);
	put_addr(m + 40, sa);
	int nfd;
	int n = ask(m, fd, r, &nfd);
	if (n < 0) {
		if (st.nofallback) {
			errno = ECONNREFUSED;
			return -1;
		}
		return real_connect(fd, sa, len); /* the daemon is gone: plain TCP */
	}
	int err = (int)get32(r + 8);
	if (err != 0 || nfd < 0)
		fcntl(fd, F_SETFL, flflags); /* the daemon shared our file status flags */
	if (err != 0) {
		if (nfd >= 0)
			syscall(SYS_close, nfd);
		errno = err;
		return -1;
	}
	if (nfd < 0 || !(get32(r + 12) & FLAG_SWAP))
		return 0; /* the peer is plain TCP: the program's socket, connected */
	pthread_mutex_lock(&st.mu);
	int rc = swap_in(fd, nfd, flflags, fdflags);
	struct fdinfo *fi = info(fd);
	if (rc >= 0 && fi) {
		memset(fi, 0, sizeof *fi);
		fi->kind = K_STREAM;
		fi->id = get32(r + 12) >> 8;
		fi->llen = get_addr(r + 16, &fi->local);
		fi->plen = get_addr(r + 40, &fi->peer);
		if (async) {
			/* A placeholder, bridged once the connection is up: the
			 * program waits for it to be writable and asks SO_ERROR,
			 * as after any non-blocking connect. */
			fi->kind = K_PENDING;
			pthread_mutex_unlock(&st.mu);
			errno = EINPROGRESS;
			return -1;
		}
	}
	pthread_mutex_unlock(&st.mu);
	return rc < 0 ? -1 : 0;
}

int listen(int fd, int backlog) {
	need();
	struct fdinfo *li = info(fd);
	if (st.enabled && li && li->kind == K_LISTENER)
		return 0; /* listening already (nginx listens again to set the backlog) */
	/* The daemon listens on the socket itself, once its vRoCE service
	 * can answer: a client that finds the port open earlier would be
	 * told there is none and use TCP. */
	if (!st.enabled || !is_tcp(fd))
		return real_listen(fd, backlog);
	int flflags = fcntl(fd, F_GETFL), fdflags = fcntl(fd, F_GETFD);
	unsigned char m[MSG_SIZE], r[MSG_SIZE];
	memset(m, 0, sizeof m);
	put32(m, MAGIC);
	put32(m + 4, OP_LISTEN);
	int nfd;
	int n = ask(m, fd, r, &nfd);
	if (n < 0 || get32(r + 8) != 0 || nfd < 0) {
		/* The daemon would not take it: the program keeps its socket,
		 * with the file status flags the daemon shared, and listens.
		 * (A listener the daemon took keeps the daemon's: it is the
		 * daemon's now.) */
		fcntl(fd, F_SETFL, flflags);
		if (nfd >= 0)
			syscall(SYS_close, nfd);
		return real_listen(fd, backlog);
	}
	pthread_mutex_lock(&st.mu);
	struct sockaddr_storage local;
	socklen_t llen = get_addr(r + 16, &local);
	if (swap_in(fd, nfd, flflags, fdflags) >= 0) {
		struct fdinfo *fi = info(fd);
		if (fi) {
			memset(fi, 0, sizeof *fi);
			fi->kind = K_LISTENER;
			fi->owner = (pid_t)syscall(SYS_getpid);
			fi->local = local;
			fi->llen = llen;
		}
	}
	pthread_mutex_unlock(&st.mu);
	return 0;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
	need();
	struct fdinfo *fi = info(fd);
	if (!st.enabled || fi == NULL || fi->kind != K_LISTENER)
		return real_accept4(fd, addr, len, flags);
	unsigned char b[ACCEPT_SIZE];
	int nfd;
	long n = recv_fd(fd, b, sizeof b, flags & SOCK_CLOEXEC ? MSG_CMSG_CLOEXEC : 0, &nfd);
	if (n < 0)
		return -1; /* EAGAIN on a non-blocking listener, EINTR, ... */
	if (n != ACCEPT_SIZE || nfd < 0) {
		if (nfd >= 0)
			syscall(SYS_close, nfd);
		errno = n == 0 ? EINVAL : ECONNABORTED; /* 0: the daemon is gone */
		return -1;
	}
	if (flags & SOCK_NONBLOCK)
		fcntl(nfd, F_SETFL, O_NONBLOCK);
	struct sockaddr_storage local, peer;
	socklen_t llen = get_addr(b + 4, &local), plen = get_addr(b + 4 + ADDR_SIZE, &peer);
	pthread_mutex_lock(&st.mu);
	struct fdinfo *ni = info(nfd);
	if (ni) {
		memset(ni, 0, sizeof *ni);
		if (get32(b) & FLAG_SWAP) {
			ni->kind = K_STREAM;
			ni->id = get32(b) >> 8;
			ni->local = local, ni->llen = llen;
			ni->peer = peer, ni->plen = plen;
		}
	}
	pthread_mutex_unlock(&st.mu);
	if (addr && len) {
		socklen_t l = *len < plen ? *len : plen;
		memcpy(addr, &peer, l);
		*len = plen;
	}
	return nfd;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len) { return accept4(fd, addr, len, 0); }

static int give_addr(const struct sockaddr_storage *ss, socklen_t have, struct sockaddr *addr, socklen_t *len) {
	if (addr == NULL || len == NULL) {
		errno = EFAULT;
		return -1;
	}
	socklen_t l = *len < have ? *len : have;
	memcpy(addr, ss, l);
	*len = have;
	return 0;
}

int getsockname(int fd, struct sockaddr *addr, socklen_t *len) {
	need();
	settled(fd);
	struct fdinfo *fi = info(fd);
	if (fi && fi->kind != K_NONE && fi->llen)
		return give_addr(&fi->local, fi->llen, addr, len);
	return real_getsockname(fd, addr, len);
}

int getpeername(int fd, struct sockaddr *addr, socklen_t *len) {
	need();
	settled(fd);
	struct fdinfo *fi = info(fd);
	if (fi && fi->kind == K_STREAM && fi->plen)
		return give_addr(&fi->peer, fi->plen, addr, len);
	if (fi && fi->kind == K_STREAM) {
		errno = ENOTCONN; /* a connect that failed */
		return -1;
	}
	return real_getpeername(fd, addr, len);
}

int getsockopt(int fd, int level, int name, void *val, socklen_t *len) {
	need();
	struct fdinfo *fi = info(fd);
	if (fi && fi->kind == K_PENDING && level == SOL_SOCKET && name == SO_ERROR && val && len && *len >= sizeof(int)) {
		int err = settled(fd);
		memcpy(val, &err, sizeof err);
		*len = sizeof err;
		return 0;
	}
	settled(fd);
	if (fi == NULL || fi->kind == K_NONE || val == NULL || len == NULL)
		return real_getsockopt(fd, level, name, val, len);
	int v = -1;
	if (level == SOL_SOCKET && name == SO_DOMAIN)
		v = fi->local.ss_family ? fi->local.ss_family : AF_INET;
	else if (level == SOL_SOCKET && name == SO_PROTOCOL)
		v = IPPROTO_TCP;
	else if (level == SOL_SOCKET && name == SO_TYPE)
		v = SOCK_STREAM;
	else if (level == IPPROTO_TCP && name == TCP_NODELAY)
		v = fi->nodelay;
	else if (level == IPPROTO_TCP && name == TCP_INFO) {
		/* The stream's own transport, in TCP's terms. */
		struct tcp_info ti;
		memset(&ti, 0, sizeof ti);
		ti.tcpi_state = TCP_ESTABLISHED;
		unsigned char in[INFO_SIZE];
		if (stream_op(OP_INFO, fi->id, in, sizeof in) == 0) {
			uint64_t tx, rx;
			ti.tcpi_rtt = get32(in);
			ti.tcpi_rttvar = get32(in) / 2;
			ti.tcpi_total_retrans = get32(in + 8);
			ti.tcpi_retransmits = (uint8_t)get32(in + 12);
			ti.tcpi_snd_cwnd = get32(in + 16);
			ti.tcpi_snd_mss = ti.tcpi_rcv_mss = ti.tcpi_pmtu = get32(in + 20);
			memcpy(&tx, in + 24, 8);
			memcpy(&rx, in + 32, 8);
			(void)tx, (void)rx;
		}
		socklen_t l = *len < sizeof ti ? *len : sizeof ti;
		memcpy(val, &ti, l);
		*len = l;
		return 0;
	} else if (level == IPPROTO_TCP) {
		v = 0; /* recorded nowhere: what a fresh TCP socket says */
	}
	if (v < 0)
		return real_getsockopt(fd, level, name, val, len);
	if (*len < sizeof(int)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(val, &v, sizeof v);
	*len = sizeof v;
	return 0;
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len) {
	need();
	struct fdinfo *fi = info(fd);
	if (fi == NULL || fi->kind == K_NONE)
		return real_setsockopt(fd, level, name, val, len);
	if (level == IPPROTO_TCP) {
		if (name == TCP_NODELAY && val && len >= sizeof(int))
			memcpy(&fi->nodelay, val, sizeof(int));
		return 0; /* the stream has no Nagle and its own timers */
	}
	if (level == SOL_SOCKET && name == SO_LINGER && val && len >= sizeof(struct linger)) {
		struct linger l;
		memcpy(&l, val, sizeof l);
		if (l.l_onoff && l.l_linger == 0 && fi->kind == K_STREAM)
			stream_op(OP_LINGER0, fi->id, NULL, 0); /* close resets the stream */
	}
	int rc = real_setsockopt(fd, level, name, val, len);
	if (rc < 0 && (errno == ENOPROTOOPT || errno == EOPNOTSUPP))
		return 0; /* a TCP-only socket option, meaningless on the bridge */
	return rc;
}

static void forget(int fd) {
	struct fdinfo *fi = info(fd);
	if (fi)
		memset(fi, 0, sizeof *fi);
	for (int i = 0; i < st.nregs;)
		if (st.regs[i].fd == fd || st.regs[i].epfd == fd)
			st.regs[i] = st.regs[--st.nregs];
		else
			i++;
}

/* unlisten hands a listener back before it closes: the daemon closes the
 * TCP listener, then its end of the accept queue, which this waits for
 * (up to a second), closing whatever accepted descriptors were queued.
 * So the port is free again when close returns. */
static void unlisten(int fd) {
	syscall(SYS_shutdown, fd, SHUT_WR);
	for (int waited = 0; waited < 1000;) {
		unsigned char b[ACCEPT_SIZE];
		int q;
		long n = recv_fd(fd, b, sizeof b, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, &q);
		if (n == 0)
			return; /* the daemon let go */
		if (n > 0) {
			if (q >= 0)
				syscall(SYS_close, q); /* accepted, never to be */
			continue;
		}
		if (errno != EAGAIN && errno != EINTR)
			return;
		struct pollfd p = {fd, POLLIN, 0};
		syscall(SYS_poll, &p, 1, 10);
		waited += 10;
	}
}

/* lose_ctl forgets the control socket when the program has closed fd
 * (or put another file there) and fd was it. It waits for a round trip
 * in flight only then: a close of any other descriptor does not. */
static void lose_ctl(int fd) {
	if (fd != __atomic_load_n(&st.ctl, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&st.ctlmu);
	if (fd == st.ctl)
		__atomic_store_n(&st.ctl, -1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&st.ctlmu);
}

int close(int fd) {
	need();
	struct fdinfo *fi = info(fd);
	/* Only the process that listened hands the listener back: a forked
	 * child closing its copy (redis's BGSAVE child does) must not take
	 * the parent's listener away. */
	if (st.enabled && fi && fi->kind == K_LISTENER && fi->owner == (pid_t)syscall(SYS_getpid))
		unlisten(fd);
	if (st.enabled) {
		lose_ctl(fd); /* a program that closes every descriptor */
		pthread_mutex_lock(&st.mu);
		forget(fd);
		pthread_mutex_unlock(&st.mu);
	}
	return real_close(fd);
}

static void copy_info(int from, int to) {
	struct fdinfo *a = info(from), *b = info(to);
	if (b == NULL)
		return;
	if (a)
		*b = *a;
	else
		memset(b, 0, sizeof *b);
}

/* duped carries what is known of from over to to, which a dup2 or dup3
 * has just replaced. */
static int duped(int rc, int from, int to) {
	if (rc >= 0 && st.enabled && from != to) {
		lose_ctl(to);
		pthread_mutex_lock(&st.mu);
		forget(to);
		copy_info(from, to);
		pthread_mutex_unlock(&st.mu);
	}
	return rc;
}

int dup2(int from, int to) {
	need();
	return duped(real_dup2(from, to), from, to);
}

int dup3(int from, int to, int flags) {
	need();
	return duped(real_dup3(from, to, flags), from, to);
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
	need();
	int rc = real_epoll_ctl(epfd, op, fd, ev);
	if (rc < 0 || !st.enabled)
		return rc;
	pthread_mutex_lock(&st.mu);
	int i;
	for (i = 0; i < st.nregs; i++)
		if (st.regs[i].epfd == epfd && st.regs[i].fd == fd)
			break;
	if (op == EPOLL_CTL_DEL) {
		if (i < st.nregs)
			st.regs[i] = st.regs[--st.nregs];
	} else if (ev) {
		if (i == st.nregs) {
			if (st.nregs == st.capregs) {
				int cap = st.capregs ? 2 * st.capregs : 64;
				struct reg *r = realloc(st.regs, cap * sizeof *r);
				if (r == NULL)
					goto out;
				st.regs = r, st.capregs = cap;
			}
			st.nregs++;
		}
		st.regs[i].epfd = epfd, st.regs[i].fd = fd, st.regs[i].ev = *ev;
	}
out:
	pthread_mutex_unlock(&st.mu);
	return rc;
}
