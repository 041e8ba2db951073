/* tacoma.h: the agent API for C agents (ag_c).
 *
 * A C agent is one C source file in the CODE folder. The place compiles it with the
 * system cc (this header is on the include path) and runs the binary as the agent's
 * process; its main() is the agent. The same source also builds for WebAssembly (ag_wasm:
 * clang --target=wasm32-wasi), where each meet runs it in a fresh instance and the calls
 * go through two host functions instead of a socket (see tc__flush). Whatever the agent's own briefcase (TC_SELF) holds
 * when main returns 0 is the meet's result.
 *
 *     #include <tacoma.h>
 *
 *     int main(void) {
 *         tc_list names;
 *         if (tc_folder(TC_SELF, "NAME", &names) != 0) tc_fail("%s", tc_error());
 *         for (size_t i = 0; i < names.count; i++)
 *             tc_append_textf(TC_SELF, "GREETING", "hello, %s from c",
 *                             (const char *)names.items[i].data);
 *         tc_list_free(&names);
 *         return 0;
 *     }
 *
 * Briefcases are handles: TC_SELF is the agent's own; tc_new() makes an empty one to meet
 * with, and a sync meet returns the other agent's briefcase as a new handle. The
 * briefcases themselves live in the worker that runs the agent (the C side keeps only
 * handles), and every call below is one request and reply with it over the socket named
 * by TACOMA_FD. Elements are arbitrary bytes (tc_elem: data and len); every element a
 * call returns is also NUL-terminated (the NUL not counted in len), so text can be used
 * as a C string directly.
 *
 * Every call that can fail returns -1 (a handle call: TC_ERROR) and sets the message
 * tc_error() and the kind tc_error_kind(): a failed meet's kind as the place named it
 * ("unknown-agent", "agent-failed", "agent-killed", "timeout", "unavailable",
 * "limit-exceeded", ...) or "bad-argument" for a misused call. A lost channel to the
 * worker ends the agent (status 70): nothing could be returned anyway. The calls are not
 * thread-safe, and a forked child must not use them (they share the one channel).
 *
 * A crash (SIGSEGV, SIGABRT from abort() or assert(), SIGBUS, SIGFPE, SIGILL) writes a
 * backtrace to stderr before the process dies, and the meet fails with the signal, the
 * last line the agent wrote before it, and the backtrace. Functions appear in it by name
 * unless they are static or inlined.
 *
 * Everything here is static: the header is the whole library, nothing is linked.
 * Why a hand-written wire format and not msgpack: this side must be one header with no
 * library to install, and the messages it exchanges are only lists of byte strings:
 * a big-endian u32 count, then for each part a big-endian u32 length and the bytes.
 */
#ifndef TACOMA_H
#define TACOMA_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifndef __wasm__
#include <execinfo.h>
#include <signal.h>
#include <sys/socket.h>
#endif

#define TC__API static __attribute__((unused))

typedef int tc_bc;       /* a briefcase handle */
#define TC_SELF 0        /* the agent's own briefcase: the meet's result */
#define TC_ERROR (-1)    /* what a call returning a handle returns when it fails */

typedef struct {
    unsigned char *data; /* the bytes, followed by a NUL not counted in len */
    size_t len;
} tc_elem;

typedef struct {
    tc_elem *items;
    size_t count;
} tc_list;

/* Reading and writing folders (of TC_SELF or any other handle). */
TC__API int tc_folders(tc_bc bc, tc_list *names);                  /* folder names */
TC__API int tc_folder(tc_bc bc, const char *name, tc_list *elements); /* missing: empty */
TC__API int tc_text(tc_bc bc, const char *name, tc_list *texts); /* tc_folder, if UTF-8 */
TC__API int tc_append(tc_bc bc, const char *name, const void *data, size_t len);
TC__API int tc_append_text(tc_bc bc, const char *name, const char *text);
TC__API int tc_append_textf(tc_bc bc, const char *name, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
TC__API int tc_replace(tc_bc bc, const char *name, const tc_elem *elements, size_t count);
TC__API int tc_remove(tc_bc bc, const char *name);
TC__API void tc_list_free(tc_list *list);

/* Lazy folders (a folder that travels by reference; its data stays at the place that keeps
 * it). tc_read gives, as the one item of `out`, `length` bytes (-1: all the rest) of the
 * folder's elements joined, from `offset`: of a lazy folder only the chunks they are in
 * are fetched. tc_folder_size is the bytes the folder holds (a lazy one's, unfetched), -1
 * on error. tc_lazy makes the folder travel by reference from now on. */
TC__API int tc_read(tc_bc bc, const char *name, long long offset, long long length,
                    tc_list *out);
TC__API long long tc_folder_size(tc_bc bc, const char *name);
TC__API int tc_lazy(tc_bc bc, const char *name);

/* Briefcases to meet with. */
TC__API tc_bc tc_new(void);
TC__API int tc_free(tc_bc bc);

/* Meeting other agents: "ag_x" at this place, "ag_x@HOST:PORT" at another. timeout in
 * seconds, 0 for the place's limit. tc_meet returns the agent's briefcase (a new handle);
 * tc_meet_async copies the meet id into id (size bytes, NUL-terminated). */
TC__API tc_bc tc_meet(const char *target, tc_bc bc, double timeout);
TC__API int tc_meet_async(const char *target, tc_bc bc, double timeout, char *id,
                         size_t size);

/* Cabinets: the place's own folders, kept when agents leave. A write creates the cabinet;
 * private (nonzero) on the write that creates it makes it this agent's alone. folder NULL
 * in tc_cabinet_remove removes the whole cabinet. */
TC__API int tc_cabinet_read(const char *cabinet, const char *folder, tc_list *elements);
TC__API int tc_cabinet_append(const char *cabinet, const char *folder, const void *data,
                              size_t len, int private_);
TC__API int tc_cabinet_replace(const char *cabinet, const char *folder,
                               const tc_elem *elements, size_t count, int private_);
TC__API int tc_cabinet_remove(const char *cabinet, const char *folder);
TC__API int tc_cabinet_folders(const char *cabinet, tc_list *names);
TC__API int tc_cabinets(tc_list *names);

/* Moving (see tacoma/place/_trips.py). tc_go hands the agent, with TC_SELF, to the place
 * HOST:PORT, where main() starts again with that briefcase, and exits here: it returns
 * only if that place cannot take the agent (-1, with the place's error; the agent is still
 * here). tc_go_next goes to the first place of the ITINERARY folder, taken off it; it
 * returns 0 if the itinerary is empty (the trip is over: return, and TC_SELF goes home). */
TC__API int tc_go(const char *place);
TC__API int tc_go_next(void);

/* Messages between agents (see tacoma/place/_residents.py). tc_reside makes this agent the
 * resident NAME at its place. tc_receive returns the next message (a new handle, with an
 * ENVELOPE folder: id, kind, sender, and the sender's principal), 0 if none came within
 * timeout seconds (negative: wait as long as the meet lasts), or TC_ERROR; tc_reply
 * answers a request with a briefcase. tc_send sends a one-way message to NAME@PLACE and copies its id into id;
 * tc_send_ack sends one whose acknowledgement tc_wait_ack waits for (timeout negative:
 * without limit); tc_request sends a request and returns the reply (a new handle). */
TC__API int tc_reside(const char *name);
TC__API tc_bc tc_receive(double timeout);
TC__API int tc_reply(tc_bc message, tc_bc reply);
TC__API int tc_send(const char *target, tc_bc bc, char *id, size_t size);
TC__API int tc_send_ack(const char *target, tc_bc bc);
TC__API int tc_wait_ack(int handle, double timeout);
TC__API tc_bc tc_request(const char *target, tc_bc bc, double timeout);

/* The place's log, failing, where we are, and for whom. tc_principal is the name of the
 * identity that launched the meet (a moving agent's trip), as the place authenticated its
 * certificate; "" where the place authenticates nobody. Both strings are static. */
TC__API int tc_log(const char *level, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
TC__API void tc_fail(const char *format, ...)
    __attribute__((format(printf, 1, 2), noreturn));
TC__API const char *tc_place(void);
TC__API const char *tc_principal(void);

/* The last failed call's message and kind. */
TC__API const char *tc_error(void);
TC__API const char *tc_error_kind(void);

/* ------------------------------------------------------------------ implementation */

static char tc__message[2048];
static char tc__kind[64];
static char tc__place[256];
/* A principal is at most 200 characters (the wire's limit), so at most 800 bytes of UTF-8. */
static char tc__principal[1024];
static int tc__principal_known;

TC__API void tc__die(const char *what) {
    fprintf(stderr, "tacoma: %s\n", what);
    fflush(NULL);
    _exit(70);
}

TC__API void tc__set_error(const char *kind, const char *message, size_t len) {
    snprintf(tc__kind, sizeof tc__kind, "%s", kind);
    if (len >= sizeof tc__message) len = sizeof tc__message - 1;
    memcpy(tc__message, message, len);
    tc__message[len] = '\0';
}

#ifdef __wasm__
/* A WebAssembly agent (ag_wasm) has no socket: its worker gives it two host functions.
 * tacoma.call takes one whole request from the agent's memory, answers it and returns the
 * reply's length; tacoma.reply copies that reply into the agent's memory. A pointer and
 * length outside the agent's memory end the meet as failed: the worker reads and writes
 * nothing else. */
__attribute__((import_module("tacoma"), import_name("call")))
int tc__host_call(const unsigned char *request, size_t len);
__attribute__((import_module("tacoma"), import_name("reply")))
int tc__host_reply(unsigned char *buffer, size_t len);

static unsigned char *tc__out;
static size_t tc__out_len, tc__out_size;
static const unsigned char *tc__in;
static size_t tc__in_len, tc__in_at;

TC__API void tc__write(const void *data, size_t len) {
    if (tc__out_len + len > tc__out_size) {
        size_t size = tc__out_size ? tc__out_size : 256;
        while (size < tc__out_len + len) size *= 2;
        unsigned char *grown = (unsigned char *)realloc(tc__out, size);
        if (grown == NULL) tc__die("out of memory writing a request");
        tc__out = grown;
        tc__out_size = size;
    }
    memcpy(tc__out + tc__out_len, data, len);
    tc__out_len += len;
}

TC__API void tc__read(void *data, size_t len) {
    if (tc__in_at + len > tc__in_len) tc__die("a short reply from the worker");
    memcpy(data, tc__in + tc__in_at, len);
    tc__in_at += len;
}

/* The request written so far goes to the worker; its reply is what tc__read reads. */
TC__API void tc__flush(void) {
    static unsigned char *reply;
    int n = tc__host_call(tc__out, tc__out_len);
    tc__out_len = 0;
    free(reply);
    reply = (unsigned char *)malloc(n ? (size_t)n : 1);
    if (reply == NULL) tc__die("out of memory reading a reply");
    if (tc__host_reply(reply, (size_t)n) != n) tc__die("a short reply from the worker");
    tc__in = reply;
    tc__in_len = (size_t)n;
    tc__in_at = 0;
}
#else
static int tc__fd = -1;

TC__API int tc__channel(void) {
    if (tc__fd < 0) {
        const char *fd = getenv("TACOMA_FD");
        if (fd == NULL || *fd == '\0')
            tc__die("TACOMA_FD is not set: a C agent runs under a place (tacoma meet ag_c ...)");
        tc__fd = atoi(fd);
    }
    return tc__fd;
}

TC__API void tc__write(const void *data, size_t len) {
    const unsigned char *p = (const unsigned char *)data;
    while (len > 0) {
        ssize_t n = send(tc__channel(), p, len, MSG_NOSIGNAL); /* no SIGPIPE: status 70 */
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) tc__die("lost the channel to the worker (write)");
        p += n;
        len -= (size_t)n;
    }
}

TC__API void tc__read(void *data, size_t len) {
    unsigned char *p = (unsigned char *)data;
    while (len > 0) {
        ssize_t n = read(tc__channel(), p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) tc__die("lost the channel to the worker (read)");
        p += n;
        len -= (size_t)n;
    }
}

TC__API void tc__flush(void) {}
#endif

TC__API void tc__write_u32(size_t value) {
    unsigned char b[4] = {(unsigned char)(value >> 24), (unsigned char)(value >> 16),
                          (unsigned char)(value >> 8), (unsigned char)value};
    if (value > 0xFFFFFFFFu) tc__die("a message part over 4 GiB");
    tc__write(b, 4);
}

TC__API size_t tc__read_u32(void) {
    unsigned char b[4];
    tc__read(b, 4);
    return ((size_t)b[0] << 24) | ((size_t)b[1] << 16) | ((size_t)b[2] << 8) | b[3];
}

TC__API void tc__send(size_t count, const tc_elem *parts) {
    tc__write_u32(count);
    for (size_t i = 0; i < count; i++) {
        tc__write_u32(parts[i].len);
        tc__write(parts[i].data, parts[i].len);
    }
}

TC__API void tc_list_free(tc_list *list) {
    if (list == NULL || list->items == NULL) return;
    for (size_t i = 0; i < list->count; i++) free(list->items[i].data);
    free(list->items);
    list->items = NULL;
    list->count = 0;
}

TC__API void tc__receive(tc_list *out) {
    size_t count = tc__read_u32();
    out->count = 0;
    out->items = (tc_elem *)calloc(count ? count : 1, sizeof(tc_elem));
    if (out->items == NULL) tc__die("out of memory reading a reply");
    for (size_t i = 0; i < count; i++) {
        size_t len = tc__read_u32();
        unsigned char *data = (unsigned char *)malloc(len + 1);
        if (data == NULL) tc__die("out of memory reading a reply");
        tc__read(data, len);
        data[len] = '\0';
        out->items[i].data = data;
        out->items[i].len = len;
        out->count = i + 1;
    }
}

/* printf into a new buffer (free it); NULL if out of memory. */
TC__API char *tc__vformat(const char *format, va_list args, int *length) {
    va_list copy;
    va_copy(copy, args);
    int n = vsnprintf(NULL, 0, format, copy);
    va_end(copy);
    char *text = n < 0 ? NULL : (char *)malloc((size_t)n + 1);
    if (text == NULL) return NULL;
    vsnprintf(text, (size_t)n + 1, format, args);
    *length = n;
    return text;
}

TC__API tc_elem tc__str(const char *s) {
    tc_elem e;
    e.data = (unsigned char *)(s != NULL ? s : "");
    e.len = strlen((const char *)e.data);
    return e;
}

/* One request and its reply. On "ok", `reply` (if given) gets the reply's values;
 * on "error KIND MESSAGE", the error is set and -1 returned. */
TC__API int tc__call(size_t count, const tc_elem *parts, tc_list *reply) {
    tc_list answer;
    tc__send(count, parts);
    tc__flush();
    tc__receive(&answer);
    if (answer.count >= 1 && strcmp((const char *)answer.items[0].data, "ok") == 0) {
        if (reply != NULL) {
            free(answer.items[0].data);
            memmove(answer.items, answer.items + 1, (answer.count - 1) * sizeof(tc_elem));
            answer.count -= 1;
            *reply = answer;
        } else {
            tc_list_free(&answer);
        }
        return 0;
    }
    if (answer.count >= 3)
        tc__set_error((const char *)answer.items[1].data, (const char *)answer.items[2].data,
                      answer.items[2].len);
    else
        tc__set_error("protocol-error", "malformed reply from the worker", 32);
    tc_list_free(&answer);
    if (reply != NULL) {
        reply->items = NULL;
        reply->count = 0;
    }
    return -1;
}

TC__API tc_elem tc__handle(tc_bc bc, char *buffer) {
    snprintf(buffer, 16, "%d", bc);
    return tc__str(buffer);
}

TC__API int tc_folders(tc_bc bc, tc_list *names) {
    char h[16];
    tc_elem parts[2] = {tc__str("folders"), tc__handle(bc, h)};
    return tc__call(2, parts, names);
}

TC__API int tc_folder(tc_bc bc, const char *name, tc_list *elements) {
    char h[16];
    tc_elem parts[3] = {tc__str("folder"), tc__handle(bc, h), tc__str(name)};
    return tc__call(3, parts, elements);
}

/* As tc_folder, but fails (bad-argument) if an element is not UTF-8 text. */
TC__API int tc_text(tc_bc bc, const char *name, tc_list *texts) {
    char h[16];
    tc_elem parts[3] = {tc__str("text"), tc__handle(bc, h), tc__str(name)};
    return tc__call(3, parts, texts);
}

TC__API int tc_append(tc_bc bc, const char *name, const void *data, size_t len) {
    char h[16];
    tc_elem parts[4] = {tc__str("append"), tc__handle(bc, h), tc__str(name),
                        {(unsigned char *)data, len}};
    return tc__call(4, parts, NULL);
}

TC__API int tc_append_text(tc_bc bc, const char *name, const char *text) {
    return tc_append(bc, name, text, strlen(text));
}

TC__API int tc_append_textf(tc_bc bc, const char *name, const char *format, ...) {
    va_list args;
    int n = 0;
    va_start(args, format);
    char *text = tc__vformat(format, args, &n);
    va_end(args);
    if (text == NULL) {
        tc__set_error("bad-argument", "out of memory formatting the text", 33);
        return -1;
    }
    int result = tc_append(bc, name, text, (size_t)n);
    free(text);
    return result;
}

TC__API int tc_replace(tc_bc bc, const char *name, const tc_elem *elements, size_t count) {
    char h[16];
    tc_elem *parts = (tc_elem *)malloc((count + 3) * sizeof(tc_elem));
    if (parts == NULL) {
        tc__set_error("bad-argument", "out of memory", 13);
        return -1;
    }
    parts[0] = tc__str("replace");
    parts[1] = tc__handle(bc, h);
    parts[2] = tc__str(name);
    if (count > 0) memcpy(parts + 3, elements, count * sizeof(tc_elem));
    int result = tc__call(count + 3, parts, NULL);
    free(parts);
    return result;
}

TC__API int tc_remove(tc_bc bc, const char *name) {
    char h[16];
    tc_elem parts[3] = {tc__str("remove"), tc__handle(bc, h), tc__str(name)};
    return tc__call(3, parts, NULL);
}

TC__API int tc_read(tc_bc bc, const char *name, long long offset, long long length,
                    tc_list *out) {
    char h[16], at[32], count[32];
    snprintf(at, sizeof at, "%lld", offset);
    snprintf(count, sizeof count, "%lld", length);
    tc_elem parts[5] = {tc__str("read"), tc__handle(bc, h), tc__str(name), tc__str(at),
                        tc__str(count)};
    return tc__call(5, parts, out);
}

TC__API long long tc_folder_size(tc_bc bc, const char *name) {
    char h[16];
    tc_list reply;
    tc_elem parts[3] = {tc__str("folder_size"), tc__handle(bc, h), tc__str(name)};
    if (tc__call(3, parts, &reply) != 0) return -1;
    long long size = reply.count == 1 ? strtoll((const char *)reply.items[0].data, NULL, 10)
                                      : -1;
    tc_list_free(&reply);
    return size;
}

TC__API int tc_lazy(tc_bc bc, const char *name) {
    char h[16];
    tc_elem parts[3] = {tc__str("lazy"), tc__handle(bc, h), tc__str(name)};
    return tc__call(3, parts, NULL);
}

TC__API tc_bc tc__handle_reply(int status, tc_list *reply) {
    tc_bc bc = TC_ERROR;
    if (status == 0) {
        bc = reply->count >= 1 ? atoi((const char *)reply->items[0].data) : TC_ERROR;
        tc_list_free(reply);
    }
    return bc;
}

TC__API tc_bc tc_new(void) {
    tc_elem parts[1] = {tc__str("new")};
    tc_list reply;
    int status = tc__call(1, parts, &reply);
    return tc__handle_reply(status, &reply);
}

TC__API int tc_free(tc_bc bc) {
    char h[16];
    tc_elem parts[2] = {tc__str("free"), tc__handle(bc, h)};
    return tc__call(2, parts, NULL);
}

TC__API int tc__meet(const char *target, tc_bc bc, double timeout, const char *mode,
                    tc_list *reply) {
    char h[16], t[32];
    snprintf(t, sizeof t, "%.17g", timeout > 0 ? timeout : 0.0);
    tc_elem parts[5] = {tc__str("meet"), tc__str(target), tc__handle(bc, h), tc__str(mode),
                        tc__str(t)};
    return tc__call(5, parts, reply);
}

TC__API tc_bc tc_meet(const char *target, tc_bc bc, double timeout) {
    tc_list reply;
    int status = tc__meet(target, bc, timeout, "sync", &reply);
    return tc__handle_reply(status, &reply);
}

TC__API int tc_meet_async(const char *target, tc_bc bc, double timeout, char *id,
                         size_t size) {
    tc_list reply;
    if (tc__meet(target, bc, timeout, "async", &reply) != 0) return -1;
    if (id != NULL && size > 0)
        snprintf(id, size, "%s", reply.count >= 1 ? (const char *)reply.items[0].data : "");
    tc_list_free(&reply);
    return 0;
}

TC__API int tc__vlog(const char *level, const char *format, va_list args) {
    int n = 0;
    char *text = tc__vformat(format, args, &n);
    if (text == NULL) {
        tc__set_error("bad-argument", "out of memory formatting the message", 36);
        return -1;
    }
    tc_elem parts[3] = {tc__str("log"), tc__str(level), {(unsigned char *)text, (size_t)n}};
    int result = tc__call(3, parts, NULL);
    free(text);
    return result;
}

TC__API int tc_log(const char *level, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int result = tc__vlog(level != NULL ? level : "info", format, args);
    va_end(args);
    return result;
}

TC__API void tc_fail(const char *format, ...) {
    va_list args;
    int n = 0;
    va_start(args, format);
    char *text = tc__vformat(format, args, &n);
    va_end(args);
    if (text == NULL) tc__die("out of memory formatting the failure message");
    tc_elem parts[2] = {tc__str("fail"), {(unsigned char *)text, (size_t)n}};
    tc__call(2, parts, NULL);
    free(text);
    exit(1);
}

TC__API const char *tc_place(void) {
    if (tc__place[0] == '\0') {
        tc_elem parts[1] = {tc__str("place")};
        tc_list reply;
        if (tc__call(1, parts, &reply) == 0) {
            if (reply.count >= 1)
                snprintf(tc__place, sizeof tc__place, "%s", (const char *)reply.items[0].data);
            tc_list_free(&reply);
        }
    }
    return tc__place;
}

TC__API const char *tc_principal(void) {
    if (!tc__principal_known) {
        tc_elem parts[1] = {tc__str("principal")};
        tc_list reply;
        if (tc__call(1, parts, &reply) == 0) {
            if (reply.count >= 1)
                snprintf(tc__principal, sizeof tc__principal, "%s",
                         (const char *)reply.items[0].data);
            tc__principal_known = 1;
            tc_list_free(&reply);
        }
    }
    return tc__principal;
}

/* One ag_cabinet meet: OP, CABINET (unless NULL), then `extra` (a handle to add to, or
 * -1); returns the result handle, or TC_ERROR. The request handle is freed. */
TC__API tc_bc tc__cabinet(const char *op, const char *cabinet, tc_bc request) {
    tc_bc bc = request >= 0 ? request : tc_new();
    if (bc == TC_ERROR) return TC_ERROR;
    tc_bc result = TC_ERROR;
    if (tc_append_text(bc, "OP", op) == 0 &&
        (cabinet == NULL || tc_append_text(bc, "CABINET", cabinet) == 0))
        result = tc_meet("ag_cabinet", bc, 0);
    tc_free(bc);
    return result;
}

TC__API int tc__cabinet_list(const char *op, const char *cabinet, const char *folder,
                             const char *answer, tc_list *out) {
    tc_bc request = tc_new();
    if (request == TC_ERROR) return -1;
    if (folder != NULL && tc_append_text(request, "FOLDER", folder) != 0) {
        tc_free(request);
        return -1;
    }
    tc_bc result = tc__cabinet(op, cabinet, request);
    if (result == TC_ERROR) return -1;
    int status = tc_folder(result, answer, out);
    tc_free(result);
    return status;
}

TC__API int tc__cabinet_write(const char *op, const char *cabinet, const char *folder,
                              const tc_elem *elements, size_t count, int private_) {
    tc_bc request = tc_new();
    if (request == TC_ERROR) return -1;
    if (tc_replace(request, folder, elements, count) != 0 ||
        (private_ && tc_append_text(request, "PRIVATE", "1") != 0)) {
        tc_free(request);
        return -1;
    }
    tc_bc result = tc__cabinet(op, cabinet, request);
    if (result == TC_ERROR) return -1;
    tc_free(result);
    return 0;
}

TC__API int tc_cabinet_read(const char *cabinet, const char *folder, tc_list *elements) {
    return tc__cabinet_list("read", cabinet, folder, folder, elements);
}

TC__API int tc_cabinet_append(const char *cabinet, const char *folder, const void *data,
                              size_t len, int private_) {
    tc_elem element = {(unsigned char *)data, len};
    return tc__cabinet_write("append", cabinet, folder, &element, 1, private_);
}

TC__API int tc_cabinet_replace(const char *cabinet, const char *folder,
                               const tc_elem *elements, size_t count, int private_) {
    return tc__cabinet_write("replace", cabinet, folder, elements, count, private_);
}

TC__API int tc_cabinet_remove(const char *cabinet, const char *folder) {
    tc_list ignored;
    int status = tc__cabinet_list("remove", cabinet, folder, "FOLDERS", &ignored);
    if (status == 0) tc_list_free(&ignored);
    return status;
}

TC__API int tc_cabinet_folders(const char *cabinet, tc_list *names) {
    return tc__cabinet_list("folders", cabinet, NULL, "FOLDERS", names);
}

TC__API int tc_cabinets(tc_list *names) {
    return tc__cabinet_list("list", NULL, NULL, "CABINETS", names);
}

TC__API int tc_go(const char *place) {
    tc_elem parts[2] = {tc__str("go"), tc__str(place)};
    if (tc__call(2, parts, NULL) != 0) return -1;
    exit(0); /* the next place has the agent now */
}

TC__API int tc_go_next(void) {
    tc_elem parts[1] = {tc__str("go_next")};
    tc_list reply;
    if (tc__call(1, parts, &reply) != 0) return -1;
    int went = reply.count >= 1 && reply.items[0].data[0] == '1';
    tc_list_free(&reply);
    if (went) exit(0);
    return 0;
}

TC__API int tc_reside(const char *name) {
    tc_elem parts[2] = {tc__str("reside"), tc__str(name)};
    return tc__call(2, parts, NULL);
}

TC__API tc_bc tc_receive(double timeout) {
    char t[32];
    snprintf(t, sizeof t, "%.17g", timeout);
    tc_elem parts[2] = {tc__str("receive"), tc__str(t)};
    tc_list reply;
    return tc__handle_reply(tc__call(2, parts, &reply), &reply);
}

TC__API int tc_reply(tc_bc message, tc_bc reply) {
    char m[16], r[16];
    tc_elem parts[3] = {tc__str("reply"), tc__handle(message, m), tc__handle(reply, r)};
    return tc__call(3, parts, NULL);
}

TC__API int tc_send(const char *target, tc_bc bc, char *id, size_t size) {
    return tc_meet_async(target, bc, 0, id, size);
}

TC__API int tc_send_ack(const char *target, tc_bc bc) {
    char h[16];
    tc_elem parts[3] = {tc__str("send_ack"), tc__str(target), tc__handle(bc, h)};
    tc_list reply;
    return tc__handle_reply(tc__call(3, parts, &reply), &reply);
}

TC__API int tc_wait_ack(int handle, double timeout) {
    char h[16], t[32];
    snprintf(t, sizeof t, "%.17g", timeout);
    tc_elem parts[3] = {tc__str("wait_ack"), tc__handle(handle, h), tc__str(t)};
    return tc__call(3, parts, NULL);
}

TC__API tc_bc tc_request(const char *target, tc_bc bc, double timeout) {
    return tc_meet(target, bc, timeout);
}

TC__API const char *tc_error(void) { return tc__message; }
TC__API const char *tc_error_kind(void) { return tc__kind; }

#ifndef __wasm__
/* The crash report: a marker line the worker looks for, then the backtrace. Only
 * async-signal-safe calls here (backtrace() was called once at start-up, so it does not
 * load libgcc inside the handler). */
#define TC__CRASH_MARKER "--- tacoma: the C agent crashed; backtrace:\n"

TC__API void tc__crashed(int sig) {
    static const char marker[] = "\n" TC__CRASH_MARKER;
    void *frames[64];
    ssize_t ignored = write(2, marker, sizeof marker - 1);
    (void)ignored;
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void tc__start(void) {
    static char altstack[65536]; /* so a stack overflow still gets its report */
    static const int crashes[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
    void *warm[2];
    stack_t stack;
    struct sigaction action;
    backtrace(warm, 2);
    /* stdout is a file: line-buffered, so what the agent printed before a crash is kept. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    stack.ss_sp = altstack;
    stack.ss_size = sizeof altstack;
    stack.ss_flags = 0;
    sigaltstack(&stack, NULL);
    memset(&action, 0, sizeof action);
    action.sa_handler = tc__crashed;
    action.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++)
        sigaction(crashes[i], &action, NULL);
}
#endif

#endif /* TACOMA_H */
