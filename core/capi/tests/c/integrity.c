/* Nothing but what the device wrote (issue 39), from C: a guest thread keeps incrementing the
 * words between and beside the device's words while the main thread runs 10^4 bound dispatches
 * through prepare and complete, and not one increment is lost (O8 hands the emulator exactly the
 * written runs, by write_runs and by write); an event that would release or reprotect what a
 * prepared dispatch can reach is DS_WAIT naming it; a write the emulator refuses is
 * DS_HOST_CALLBACK with the lost words in the report; a write without bytes stays without bytes.
 * Guest memory is this program's own mmap'ed pages. Built and run by tests/c_abi.rs; prints one
 * line per check and "N failures" last. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dispatchscope.h"

static int failures = 0;

static void check(const char *what, int ok, const char *detail) {
    printf("%s %s%s%s\n", ok ? "ok" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
    if (!ok) failures++;
}

static void expect(const char *what, ds_status got, ds_status want, const char *words) {
    const char *message = ds_last_error();
    int ok = got == want && (want == DS_OK ? message[0] == '\0' : message[0] != '\0');
    if (ok && words != NULL) ok = strstr(message, words) != NULL;
    printf("%s %s: status %d (want %d): %s\n", ok ? "ok" : "FAIL", what, (int)got, (int)want,
           message);
    if (!ok) failures++;
}

#define PAGE 4096u
#define GUEST 0x500000000ull

/* The emulator: writes land with a copy, except into [refuse, refuse + 4). */
struct emulator {
    uint64_t refuse;
    uint64_t bytes_written;
    uint64_t batches;
};

static int32_t on_write(void *user, uint64_t host, const uint8_t *src, uint64_t n) {
    struct emulator *e = user;
    if (e->refuse && host < e->refuse + 4 && e->refuse < host + n) return -22;
    memcpy((void *)(uintptr_t)host, src, (size_t)n);
    e->bytes_written += n;
    return 0;
}
static int32_t on_write_runs(void *user, const ds_write_run *runs, uint64_t n, uint64_t *failed_at) {
    struct emulator *e = user;
    e->batches++;
    for (uint64_t k = 0; k < n; k++) {
        if (on_write(user, runs[k].host_addr, runs[k].src, runs[k].bytes) != 0) {
            *failed_at = k;
            return -22;
        }
    }
    return 0;
}
static int32_t on_range(void *user, uint64_t host, uint64_t n) {
    (void)user;
    (void)host;
    (void)n;
    return 0;
}
static int32_t on_hand_off(void *user, uint64_t start, uint64_t end, uint64_t host) {
    (void)user;
    (void)start;
    (void)end;
    (void)host;
    return 0;
}

/* The guest's CPU thread: the odd words of page 1 and the first word of page 2, atomically. */
struct guest {
    _Atomic uint32_t *page1, *beside;
    atomic_int stop;
    uint64_t increments;
};

static void *guest_thread(void *arg) {
    struct guest *g = arg;
    while (!atomic_load(&g->stop)) {
        for (unsigned w = 1; w < PAGE / 4; w += 2) atomic_fetch_add(&g->page1[w], 1);
        atomic_fetch_add(g->beside, 1);
        g->increments++;
    }
    return NULL;
}

static ds_engine make(struct emulator *emu, int batched) {
    ds_limits limits;
    ds_limits_default(&limits);
    ds_host_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.size = sizeof cb;
    cb.abi_version = DS_ABI_VERSION;
    cb.user = emu;
    cb.write = on_write;
    cb.commit = on_range;
    cb.release_guards = on_range;
    cb.hand_off = on_hand_off;
    if (batched) cb.write_runs = on_write_runs;
    ds_engine engine = 0;
    expect("create host", ds_engine_create_host(&limits, &cb, &engine), DS_OK, NULL);
    return engine;
}

static void reserve(ds_engine engine, uint8_t *pages, uint64_t bytes) {
    ds_event e;
    memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.kind = DS_EVENT_RESERVE;
    e.start = GUEST;
    e.end = GUEST + bytes;
    e.host_address = (uint64_t)(uintptr_t)pages;
    e.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED;
    expect("reserve", ds_engine_apply(engine, &e), DS_OK, NULL);
}

/* One bound dispatch over page 1 (slot 0, written), prepared. */
static ds_status prepare(ds_engine engine, ds_prepared *p, ds_slot_plan *plans) {
    ds_slot slot;
    memset(&slot, 0, sizeof slot);
    slot.size = sizeof slot;
    slot.flags = DS_SLOT_WRITTEN | DS_SLOT_RESOLVED;
    slot.base = GUEST + PAGE;
    slot.size_bytes = PAGE;
    slot.alias_of = DS_NO_ALIAS;
    ds_dispatch d;
    memset(&d, 0, sizeof d);
    d.size = sizeof d;
    d.program = 0x400000002000ull;
    d.slots = &slot;
    d.n_slots = 1;
    memset(p, 0, sizeof *p);
    p->size = sizeof *p;
    p->bindings = plans;
    p->bindings_capacity = 1;
    return ds_engine_prepare(engine, &d, p);
}

static ds_status complete(ds_engine engine, uint64_t index, const uint8_t *data, const uint8_t *masks) {
    ds_holder_run h;
    memset(&h, 0, sizeof h);
    h.slot = 0;
    h.data = data;
    h.data_bytes = PAGE;
    h.masks = masks;
    h.mask_bytes = PAGE;
    ds_completion c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.index = index;
    c.holders = &h;
    c.n_holders = 1;
    return ds_engine_complete(engine, &c);
}

/* 10^4 dispatches under a guest thread on an engine; every word checked after. */
static void lost_updates(int batched) {
    const uint64_t bytes = 4 * PAGE;
    uint8_t *pages = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    check("mmap", pages != MAP_FAILED, NULL);
    memset(pages, 0, bytes);
    struct emulator emu;
    memset(&emu, 0, sizeof emu);
    ds_engine engine = make(&emu, batched);
    reserve(engine, pages, bytes);
    struct guest g;
    memset(&g, 0, sizeof g);
    g.page1 = (_Atomic uint32_t *)(pages + PAGE);
    g.beside = (_Atomic uint32_t *)(pages + 2 * PAGE);
    pthread_t t;
    pthread_create(&t, NULL, guest_thread, &g);
    static uint8_t data[PAGE], masks[PAGE];
    memset(masks, 0, sizeof masks);
    for (unsigned w = 0; w < PAGE / 4; w += 2) masks[4 * w] = 1;
    const unsigned dispatches = 10000;
    ds_slot_plan plan;
    ds_prepared p;
    int bad = 0;
    for (unsigned i = 0; i < dispatches; i++) {
        for (unsigned w = 0; w < PAGE / 4; w += 2) {
            uint32_t v = i ^ w;
            memcpy(data + 4 * w, &v, 4);
        }
        if (prepare(engine, &p, &plan) != DS_OK || complete(engine, p.index, data, masks) != DS_OK) {
            bad++;
            printf("dispatch %u: %s\n", i, ds_last_error());
            break;
        }
    }
    atomic_store(&g.stop, 1);
    pthread_join(t, NULL);
    check("every prepare and complete DS_OK", bad == 0, NULL);
    int lost = 0;
    for (unsigned w = 0; w < PAGE / 4; w++) {
        uint32_t got;
        memcpy(&got, pages + PAGE + 4 * w, 4);
        uint32_t want = (w % 2 == 0) ? ((dispatches - 1) ^ w) : (uint32_t)g.increments;
        if (got != want) lost++;
    }
    uint32_t beside;
    memcpy(&beside, pages + 2 * PAGE, 4);
    char detail[160];
    snprintf(detail, sizeof detail, "%s: %llu increments, %d words wrong, %llu bytes written, %llu batches",
             batched ? "write_runs" : "write", (unsigned long long)g.increments, lost,
             (unsigned long long)emu.bytes_written, (unsigned long long)emu.batches);
    check("no increment lost and every device word in place", lost == 0 && beside == (uint32_t)g.increments,
          detail);
    check("exactly the written words went to the emulator",
          emu.bytes_written == (uint64_t)dispatches * PAGE / 2 && (batched ? emu.batches == dispatches : emu.batches == 0),
          detail);
    expect("destroy", ds_engine_destroy(engine), DS_OK, NULL);
    munmap(pages, bytes);
}

/* With a path, the last part's session is also written as a capture there (`dispatchscope explain
 * PATH` and the window show its waits and its lost word). */
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    lost_updates(1);
    lost_updates(0);

    const uint64_t bytes = 4 * PAGE;
    uint8_t *pages = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(pages, 0x11, bytes);
    struct emulator emu;
    memset(&emu, 0, sizeof emu);
    ds_engine engine = make(&emu, 1);
    if (argc > 1)
        expect("capture", ds_engine_capture_begin(engine, argv[1], "issue 39: a refused word"), DS_OK, NULL);
    reserve(engine, pages, bytes);

    /* A CPU write without its bytes: noted, never made zeros (the next report's events say so). */
    ds_event e;
    memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.kind = DS_EVENT_WRITE;
    e.start = GUEST + 3 * PAGE;
    e.n_bytes = 64;
    e.bytes = NULL;
    expect("a write without bytes", ds_engine_apply(engine, &e), DS_OK, NULL);

    /* M5: a release or a guard of what the prepared dispatch can reach waits for it. */
    ds_slot_plan plan;
    ds_prepared p;
    expect("prepare", prepare(engine, &p, &plan), DS_OK, NULL);
    char words[64];
    snprintf(words, sizeof words, "complete (or abandon) dispatch %llu", (unsigned long long)p.index);
    memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.kind = DS_EVENT_RELEASE;
    e.start = GUEST;
    expect("release while prepared", ds_engine_apply(engine, &e), DS_WAIT, words);
    e.kind = DS_EVENT_GUARD;
    e.start = GUEST + PAGE;
    e.end = GUEST + 2 * PAGE;
    expect("guard the holder while prepared", ds_engine_apply(engine, &e), DS_WAIT, words);
    check("ds_last_wait names the dispatch", ds_last_wait() == p.index, NULL);
    e.start = GUEST + 3 * PAGE;
    e.end = GUEST + 4 * PAGE;
    expect("guard beside it", ds_engine_apply(engine, &e), DS_OK, NULL);
    check("ds_last_wait is cleared by a call that did not wait", ds_last_wait() == UINT64_MAX, NULL);

    /* The emulator refuses the write of one word: DS_HOST_CALLBACK, the word named and kept. */
    static uint8_t data[PAGE], masks[PAGE];
    memset(data, 0x22, sizeof data);
    memset(masks, 0, sizeof masks);
    masks[4 * 3] = 1;
    masks[4 * 9] = 1;
    emu.refuse = (uint64_t)(uintptr_t)(pages + PAGE + 4 * 9);
    expect("complete with a refused word", complete(engine, p.index, data, masks), DS_HOST_CALLBACK,
           "not written");
    const char *json = NULL;
    size_t len = 0;
    expect("the report is still there", ds_engine_report_json(engine, &json, &len), DS_OK, NULL);
    check("it names the lost word and its bytes",
          json && strstr(json, "\"write-back\"") && strstr(json, "\"bytes\":\"22222222\""), json);
    check("it lists what waited", json && strstr(json, "\"waited\"") && strstr(json, "\"release\""), NULL);
    check("the write without bytes is said to be one", json && strstr(json, "\"event\":\"wrote\""), NULL);
    uint32_t w3, w9, w4;
    memcpy(&w3, pages + PAGE + 12, 4);
    memcpy(&w9, pages + PAGE + 36, 4);
    memcpy(&w4, pages + PAGE + 16, 4);
    check("the landed word landed, the refused one and the unwritten one are untouched",
          w3 == 0x22222222u && w9 == 0x11111111u && w4 == 0x11111111u, NULL);
    e.kind = DS_EVENT_RELEASE;
    e.start = GUEST;
    expect("release after complete", ds_engine_apply(engine, &e), DS_OK, NULL);
    if (argc > 1) expect("capture end", ds_engine_capture_end(engine), DS_OK, NULL);
    expect("destroy", ds_engine_destroy(engine), DS_OK, NULL);
    munmap(pages, bytes);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
