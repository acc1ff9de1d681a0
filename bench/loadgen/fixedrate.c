/*
 * fixedrate: an open-loop, fixed-rate HTTPS POST load generator for loopback benchmarks.
 *
 * Why this exists: wrk is closed-loop (it sends the next request when the previous answer
 * arrives), so it can only measure saturation; its latencies at a "rate" suffer from
 * coordinated omission. Debian ships no wrk2. The apiserver calls a webhook at whatever rate
 * pods are created, independent of how fast the webhook answers, so latency at a fixed offered
 * rate is the number that matters.
 *
 * Request i is due at start + i/rate. It is sent on the first idle keep-alive connection; when
 * every connection is busy it waits in a queue. Latency is measured from the *due* time to the
 * last byte of the response, so queueing behind a slow server is counted (as wrk2 does).
 *
 * Bounded by construction: it runs for --duration seconds (plus at most 2 s to drain), sends at
 * most rate x duration requests, and refuses any host that is not loopback (127.0.0.0/8).
 *
 * Usage: fixedrate -u https://127.0.0.1:8443/mutate -b body.json -r 500 -d 10 [-c 16] [-w 2]
 * Prints one JSON object on stdout.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 256
#define MAX_DURATION 120
#define MAX_RATE 50000
#define RBUF 65536

typedef struct {
    int fd;
    SSL *ssl;
    int busy;            /* a request is in flight */
    int64_t due_ns;      /* due time of the request in flight */
    size_t woff;         /* bytes of the request written so far */
    char rbuf[RBUF];
    size_t rlen;
    long want;           /* total response bytes (headers + body) once known, else -1 */
    int status;
    int want_write;      /* waiting for EPOLLOUT */
} conn_t;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *msg) {
    fprintf(stderr, "fixedrate: %s\n", msg);
    ERR_print_errors_fp(stderr);
    exit(2);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open body file");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > 16 * 1024 * 1024) die("body file too large");
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) die("cannot read body file");
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct(const int64_t *sorted, size_t n, double p) {
    if (n == 0) return 0.0;
    size_t idx = (size_t)ceil(p / 100.0 * (double)n);
    if (idx > 0) idx--;
    if (idx >= n) idx = n - 1;
    return (double)sorted[idx] / 1e6;
}

/* --------------------------------------------------------------------------------- state */

static SSL_CTX *ctx;
static struct sockaddr_in addr;
static int epfd;
static char *request;
static size_t request_len;
static conn_t conns[MAX_CONNS];
static int nconns = 16;
static int64_t *lat;     /* latencies (ns) of requests due after warm-up */
static size_t nlat, lat_cap;
static long completed, errors, non200, sent, reconnects, measured_done;
static int64_t measure_from_ns;

static void conn_open(conn_t *c) {
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0) die("socket");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) die("connect refused");
    c->ssl = SSL_new(ctx);
    SSL_set_fd(c->ssl, c->fd);
    SSL_set_tlsext_host_name(c->ssl, "localhost");
    if (SSL_connect(c->ssl) != 1) die("TLS handshake failed");
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) die("epoll_ctl");
    c->busy = 0;
    c->rlen = 0;
    c->want = -1;
    c->want_write = 0;
}

static void conn_close(conn_t *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    SSL_free(c->ssl);
    close(c->fd);
}

static void conn_fail(conn_t *c) {
    if (c->busy) errors++;
    conn_close(c);
    reconnects++;
    conn_open(c);
}

static void set_write_interest(conn_t *c, int on) {
    if (c->want_write == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_write = on;
}

/* Write as much of the pending request as the socket takes. 0 ok/again, -1 error. */
static int conn_write(conn_t *c) {
    while (c->woff < request_len) {
        int n = SSL_write(c->ssl, request + c->woff, (int)(request_len - c->woff));
        if (n > 0) {
            c->woff += (size_t)n;
            continue;
        }
        int err = SSL_get_error(c->ssl, n);
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
            set_write_interest(c, 1);
            return 0;
        }
        return -1;
    }
    set_write_interest(c, 0);
    return 0;
}

static void conn_send(conn_t *c, int64_t due) {
    c->busy = 1;
    c->due_ns = due;
    c->woff = 0;
    c->rlen = 0;
    c->want = -1;
    sent++;
    if (conn_write(c) != 0) conn_fail(c);
}

/* Parse status and Content-Length once the headers are in. */
static void parse_headers(conn_t *c) {
    char *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
    if (!end) return;
    size_t hlen = (size_t)(end - c->rbuf) + 4;
    c->status = atoi(c->rbuf + 9);
    long clen = 0;
    for (char *p = c->rbuf; p < end; p++) {
        if ((p == c->rbuf || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) {
            clen = strtol(p + 15, NULL, 10);
            break;
        }
    }
    c->want = (long)hlen + clen;
}

static void add_latency(int64_t ns) {
    if (nlat == lat_cap) {
        lat_cap = lat_cap ? lat_cap * 2 : 4096;
        lat = realloc(lat, lat_cap * sizeof *lat);
        if (!lat) die("out of memory");
    }
    lat[nlat++] = ns;
}

static void conn_done(conn_t *c, int64_t t) {
    completed++;
    if (c->status != 200) non200++;
    if (c->due_ns >= measure_from_ns) {
        add_latency(t - c->due_ns);
        measured_done++;
    }
    c->busy = 0;
    /* a response larger than the buffer: keep only what belongs to the next one (nothing, no pipelining) */
    c->rlen = 0;
    c->want = -1;
}

static void conn_read(conn_t *c) {
    for (;;) {
        if (c->rlen == RBUF) {
            /* Body bigger than the buffer: we only need the count, so drop what was read. */
            if (c->want < 0) { errors++; conn_fail(c); return; }
            c->want -= (long)c->rlen;
            c->rlen = 0;
        }
        int n = SSL_read(c->ssl, c->rbuf + c->rlen, (int)(RBUF - c->rlen));
        if (n <= 0) {
            int err = SSL_get_error(c->ssl, n);
            if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
            conn_fail(c);
            return;
        }
        if (!c->busy) continue; /* unsolicited bytes: ignore */
        c->rlen += (size_t)n;
        if (c->want < 0) parse_headers(c);
        if (c->want >= 0 && (long)c->rlen >= c->want) conn_done(c, now_ns());
    }
}

static int is_loopback(const char *host) {
    struct in_addr a;
    if (strcmp(host, "localhost") == 0) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &a) != 1) return 0;
    return (ntohl(a.s_addr) >> 24) == 127;
}

int main(int argc, char **argv) {
    const char *url = NULL, *body_path = NULL, *ca = NULL;
    double rate = 0, duration = 10, warmup = 1;
    static struct option opts[] = {
        {"url", required_argument, 0, 'u'}, {"body", required_argument, 0, 'b'},
        {"rate", required_argument, 0, 'r'}, {"duration", required_argument, 0, 'd'},
        {"connections", required_argument, 0, 'c'}, {"warmup", required_argument, 0, 'w'},
        {"cacert", required_argument, 0, 'k'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "u:b:r:d:c:w:k:", opts, NULL)) != -1) {
        switch (o) {
        case 'u': url = optarg; break;
        case 'b': body_path = optarg; break;
        case 'r': rate = atof(optarg); break;
        case 'd': duration = atof(optarg); break;
        case 'c': nconns = atoi(optarg); break;
        case 'w': warmup = atof(optarg); break;
        case 'k': ca = optarg; break;
        default: die("usage: fixedrate -u https://127.0.0.1:PORT/PATH -b BODY -r RATE -d SECONDS [-c CONNS] "
                     "[-w WARMUP] [-k CA]");
        }
    }
    if (!url || !body_path || rate <= 0) die("need -u URL -b BODY -r RATE");
    if (rate > MAX_RATE || duration <= 0 || duration > MAX_DURATION || nconns < 1 || nconns > MAX_CONNS ||
        warmup < 0 || warmup >= duration)
        die("out of bounds: rate <= 50000, 0 < duration <= 120, 1 <= connections <= 256, warmup < duration");

    char host[256], path[1024] = "/";
    int port = 443;
    if (sscanf(url, "https://%255[^:/]:%d%1023s", host, &port, path) < 2 &&
        sscanf(url, "https://%255[^:/]%1023s", host, path) < 1)
        die("url must be https://HOST[:PORT]/PATH");
    if (!is_loopback(host)) die("refusing a non-loopback target: only 127.0.0.0/8 is allowed");
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host, &addr.sin_addr);

    size_t body_len;
    char *body = read_file(body_path, &body_len);
    request = malloc(body_len + 512);
    int hl = snprintf(request, 512,
                      "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                      "Accept: application/json\r\nContent-Length: %zu\r\n\r\n",
                      path, host, port, body_len);
    memcpy(request + hl, body, body_len);
    request_len = (size_t)hl + body_len;

    ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) die("SSL_CTX_new");
    if (ca) {
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) die("cannot load CA");
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    epfd = epoll_create1(0);
    for (int i = 0; i < nconns; i++) conn_open(&conns[i]);

    const int64_t interval = (int64_t)(1e9 / rate);
    const int64_t start = now_ns();
    const int64_t end = start + (int64_t)(duration * 1e9);
    measure_from_ns = start + (int64_t)(warmup * 1e9);
    const long total = (long)(rate * duration);
    /* queue of due times not yet sent (ring buffer) */
    size_t qcap = (size_t)total + 1, qhead = 0, qtail = 0;
    int64_t *queue = malloc(qcap * sizeof *queue);
    long scheduled = 0;
    struct epoll_event events[MAX_CONNS];
    int64_t drain_deadline = end + 2000000000LL;

    for (;;) {
        int64_t t = now_ns();
        while (scheduled < total && start + scheduled * interval <= t) {
            queue[qtail++ % qcap] = start + scheduled * interval;
            scheduled++;
        }
        for (int i = 0; i < nconns && qhead != qtail; i++) {
            if (!conns[i].busy) conn_send(&conns[i], queue[qhead++ % qcap]);
        }
        int inflight = 0;
        for (int i = 0; i < nconns; i++) inflight += conns[i].busy;
        if (scheduled >= total && qhead == qtail && inflight == 0) break;
        if (t > drain_deadline) break;
        /* Block at most 1 ms, and only while the next request is at least 2 ms away; otherwise
         * spin. A sleep that overshoots would send late and the delay would be charged to the
         * server. The load generator has its own core, so spinning costs the server nothing. */
        int timeout_ms = 1;
        if (scheduled < total && start + scheduled * interval - t < 2000000) timeout_ms = 0;
        int n = epoll_wait(epfd, events, MAX_CONNS, timeout_ms);
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (events[i].events & (EPOLLERR | EPOLLHUP)) {
                conn_fail(c);
                continue;
            }
            if ((events[i].events & EPOLLOUT) && c->busy && c->woff < request_len) {
                if (conn_write(c) != 0) {
                    conn_fail(c);
                    continue;
                }
            }
            if (events[i].events & EPOLLIN) conn_read(c);
        }
    }
    int64_t finished = now_ns();
    long unfinished = (long)(qtail - qhead);
    for (int i = 0; i < nconns; i++) unfinished += conns[i].busy;
    unfinished += total - scheduled;

    /* Requests still queued or in flight at the drain deadline count with the time they had waited
     * so far (a lower bound): leaving them out would flatter an overloaded server. */
    for (size_t q = qhead; q != qtail; q++) {
        if (queue[q % qcap] >= measure_from_ns) add_latency(finished - queue[q % qcap]);
    }
    for (int i = 0; i < nconns; i++) {
        if (conns[i].busy && conns[i].due_ns >= measure_from_ns) add_latency(finished - conns[i].due_ns);
    }
    qsort(lat, nlat, sizeof *lat, cmp_i64);
    double sum = 0;
    for (size_t i = 0; i < nlat; i++) sum += (double)lat[i] / 1e6;
    double measured_s = (double)(end - measure_from_ns) / 1e9;
    printf("{\"target_rps\": %.1f, \"duration_s\": %.2f, \"warmup_s\": %.2f, \"connections\": %d, "
           "\"sent\": %ld, \"completed\": %ld, \"errors\": %ld, \"non_200\": %ld, \"unfinished\": %ld, "
           "\"reconnects\": %ld, \"achieved_rps\": %.1f, \"measured\": %ld, \"mean_ms\": %.3f, "
           "\"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, "
           "\"wall_s\": %.2f}\n",
           rate, duration, warmup, nconns, sent, completed, errors, non200, unfinished, reconnects,
           (double)measured_done / measured_s, measured_done, nlat ? sum / (double)nlat : 0.0,
           pct(lat, nlat, 50), pct(lat, nlat, 90), pct(lat, nlat, 99), pct(lat, nlat, 99.9),
           nlat ? (double)lat[nlat - 1] / 1e6 : 0.0, (double)(finished - start) / 1e9);
    for (int i = 0; i < nconns; i++) conn_close(&conns[i]);
    SSL_CTX_free(ctx);
    return 0;
}
