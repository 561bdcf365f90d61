/* ABI version 4 through the C ABI, from C (issue 39, item 5: bad input named, never a panic):
 * a wrong size in every struct that may grow, unknown flag bits and non-zero reserved fields, a
 * host callback calling back into its own engine, and report pointers that are each thread's own.
 * Guest memory is this program's own mmap'ed pages on an engine made by ds_engine_create_host.
 * Built and run by tests/c_abi.rs; prints one line per check and "N failures" last. */
#define _GNU_SOURCE
#include <pthread.h>
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

/* The status, and for a failure a message that holds `words` (NULL: any message). */
static void expect(const char *what, ds_status got, ds_status want, const char *words) {
    const char *message = ds_last_error();
    int ok = got == want && (want == DS_OK ? message[0] == '\0' : message[0] != '\0');
    if (ok && words != NULL) ok = strstr(message, words) != NULL;
    printf("%s %s: status %d (want %d): %s\n", ok ? "ok" : "FAIL", what, (int)got, (int)want,
           message);
    if (!ok) {
        if (words != NULL) printf("  wanted the words: %s\n", words);
        failures++;
    }
}

/* ---- the emulator's side ------------------------------------------------------------------ */

struct emulator {
    ds_engine engine, other;
    int writes;
    /* What the write callback got when it called back into its own engine, and into another. */
    int called_back;
    ds_status apply_status, destroy_status, report_status, other_status;
    char apply_message[512], destroy_message[512];
};

static int32_t on_write(void *user, uint64_t host, const uint8_t *src, uint64_t n) {
    struct emulator *e = user;
    e->writes++;
    memcpy((void *)(uintptr_t)host, src, (size_t)n);
    if (e->called_back++ == 0) {
        ds_event retire;
        memset(&retire, 0, sizeof retire);
        retire.size = sizeof retire;
        retire.kind = DS_EVENT_RETIRE;
        e->apply_status = ds_engine_apply(e->engine, &retire);
        snprintf(e->apply_message, sizeof e->apply_message, "%s", ds_last_error());
        e->destroy_status = ds_engine_destroy(e->engine);
        snprintf(e->destroy_message, sizeof e->destroy_message, "%s", ds_last_error());
        const char *json = NULL;
        e->report_status = ds_engine_report_json(e->engine, &json, NULL);
        ds_mode mode;
        e->other_status = ds_engine_report_mode(e->other, &mode);
    }
    return 0;
}
static int32_t on_commit(void *user, uint64_t host, uint64_t n) {
    (void)user;
    (void)host;
    (void)n;
    return 0;
}
static int32_t on_release(void *user, uint64_t host, uint64_t n) {
    (void)user;
    return mprotect((void *)(uintptr_t)host, (size_t)n, PROT_READ | PROT_WRITE);
}
static int32_t on_hand_off(void *user, uint64_t start, uint64_t end, uint64_t host) {
    (void)user;
    (void)start;
    (void)end;
    (void)host;
    return 0;
}

#define GUEST 0x200000000ull
#define BYTES 0x20000ull

static ds_event reserve(uint64_t guest, void *host, uint32_t flags) {
    ds_event e;
    memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.kind = DS_EVENT_RESERVE;
    e.start = guest;
    e.end = guest + BYTES;
    e.host_address = (uint64_t)(uintptr_t)host;
    e.flags = flags;
    return e;
}

static void words_of_size(char *out, size_t n, const char *what, uint32_t size, size_t ours,
                          const char *name) {
    snprintf(out, n, "%s.size is %u, but this library's %s is %zu bytes", what, size, name, ours);
}

/* ---- two threads, each with its own report pointer ---------------------------------------- */

#define ROUNDS 200

struct reader {
    ds_engine engine;
    int id;
    pthread_barrier_t *barrier;
    ds_dispatch *dispatch;
    int bad; /* rounds whose pointer did not hold what it held when handed out */
    ds_status last;
};

static void *read_reports(void *arg) {
    struct reader *r = arg;
    r->bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
        const char *json = NULL;
        size_t len = 0;
        r->last = ds_engine_report_json(r->engine, &json, &len);
        char *copy = NULL;
        if (r->last == DS_OK && json != NULL) {
            copy = malloc(len + 1);
            if (copy != NULL) memcpy(copy, json, len + 1);
        }
        /* Both have a pointer; then one thread dispatches (a new report: the engine lets go of
         * the old one) and asks for the new one, which ends its own old pointer, while the other
         * holds its pointer and reads it after. */
        pthread_barrier_wait(r->barrier);
        int holds = round % 2 != r->id;
        if (!holds) {
            const char *again = NULL;
            size_t again_len = 0;
            if (ds_engine_dispatch(r->engine, r->dispatch) != DS_OK ||
                ds_engine_report_json(r->engine, &again, &again_len) != DS_OK || again == NULL ||
                strlen(again) != again_len)
                r->bad++;
        }
        pthread_barrier_wait(r->barrier);
        if (holds && (copy == NULL || strlen(json) != len || memcmp(copy, json, len + 1) != 0))
            r->bad++;
        free(copy);
    }
    /* The last round: thread 1 destroys the engine; both still read their pointers after. */
    const char *json = NULL;
    size_t len = 0;
    ds_status s = ds_engine_report_json(r->engine, &json, &len);
    char *copy = NULL;
    if (s == DS_OK && json != NULL) {
        copy = malloc(len + 1);
        if (copy != NULL) memcpy(copy, json, len + 1);
    }
    pthread_barrier_wait(r->barrier);
    if (r->id == 1) r->last = ds_engine_destroy(r->engine);
    pthread_barrier_wait(r->barrier);
    if (copy == NULL || strlen(json) != len || memcmp(copy, json, len + 1) != 0 ||
        strstr(json, "\"mode\"") == NULL)
        r->bad++;
    free(copy);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    char words[256];
    struct emulator emu;
    memset(&emu, 0, sizeof emu);
    uint8_t *pages = mmap(NULL, BYTES, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    check("mmap", pages != MAP_FAILED, NULL);
    check("abi version 5", ds_abi_version() == DS_ABI_VERSION && DS_ABI_VERSION == 5, NULL);

    /* ---- 1. a wrong size in each struct that may grow: DS_ABI_MISMATCH, named ---- */
    ds_limits limits;
    memset(&limits, 0xab, sizeof limits);
    expect("default limits", ds_limits_default(&limits), DS_OK, NULL);
    check("ds_limits_default fills size", limits.size == sizeof limits, NULL);
    ds_host_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.size = sizeof cb;
    cb.abi_version = DS_ABI_VERSION;
    cb.user = &emu;
    cb.write = on_write;
    cb.commit = on_commit;
    cb.release_guards = on_release;
    cb.hand_off = on_hand_off;
    ds_engine engine = 0;
    limits.size = 8;
    words_of_size(words, sizeof words, "ds_limits", 8, sizeof limits, "ds_limits");
    expect("create host with a ds_limits of size 8", ds_engine_create_host(&limits, &cb, &engine),
           DS_ABI_MISMATCH, words);
    expect("create with a ds_limits of size 8", ds_engine_create(&limits, &engine),
           DS_ABI_MISMATCH, words);
    limits.size = sizeof limits;

    ds_vulkan_device device;
    memset(&device, 0, sizeof device);
    device.size = sizeof device - 8;
    words_of_size(words, sizeof words, "ds_vulkan_device", (uint32_t)(sizeof device - 8),
                  sizeof device, "ds_vulkan_device");
    expect("create vulkan with a short ds_vulkan_device", ds_engine_create_vulkan(&device, &engine),
           DS_ABI_MISMATCH, words);
    expect("create vulkan host with a short ds_vulkan_device",
           ds_engine_create_vulkan_host(&device, &cb, &engine), DS_ABI_MISMATCH, words);
    device.size = sizeof device;
    expect("create vulkan with the right size and no handles",
           ds_engine_create_vulkan(&device, &engine), DS_NULL_POINTER,
           "device.get_instance_proc_addr is null");

    expect("create host", ds_engine_create_host(&limits, &cb, &engine), DS_OK, NULL);
    emu.engine = engine;
    ds_limits cpu_limits;
    expect("default limits again", ds_limits_default(&cpu_limits), DS_OK, NULL);
    expect("create another engine", ds_engine_create(&cpu_limits, &emu.other), DS_OK, NULL);

    /* ---- 2. unknown flag bits and reserved fields: DS_BAD_INPUT, named ---- */
    uint32_t rwc = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED;
    ds_event e = reserve(GUEST, pages, rwc | 0x30);
    expect("an event with unknown flag bits", ds_engine_apply(engine, &e), DS_BAD_INPUT,
           "event.flags has unknown bits 0x30");
    e = reserve(GUEST, pages, rwc);
    e.reserved = 7;
    expect("an event with reserved 7", ds_engine_apply(engine, &e), DS_BAD_INPUT,
           "event.reserved is 7; it must be 0");
    e.reserved = 0;
    expect("reserve", ds_engine_apply(engine, &e), DS_OK, NULL);

    /* Run 305: a 0x20-byte written range that a 0xe40f-byte written range ends inside. */
    ds_slot slots[2];
    memset(slots, 0, sizeof slots);
    slots[0].size = sizeof slots[0];
    slots[0].flags = DS_SLOT_WRITTEN | DS_SLOT_RESOLVED;
    slots[0].base = GUEST;
    slots[0].size_bytes = 0xe40f;
    slots[0].alias_of = DS_NO_ALIAS;
    slots[1] = slots[0];
    slots[1].slot = 1;
    slots[1].base = GUEST + 0xe400;
    slots[1].size_bytes = 0x20;
    ds_dispatch d;
    memset(&d, 0, sizeof d);
    d.size = sizeof d;
    d.program = 0x400003e19200ull;
    d.slots = slots;
    d.n_slots = 2;
    ds_slot_plan plans[4];
    memset(plans, 0xcd, sizeof plans);
    ds_prepared p;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = plans;
    p.bindings_capacity = 4;

    d.size = 4;
    words_of_size(words, sizeof words, "ds_dispatch", 4, sizeof d, "ds_dispatch");
    expect("prepare a ds_dispatch of size 4", ds_engine_prepare(engine, &d, &p), DS_ABI_MISMATCH,
           words);
    expect("dispatch a ds_dispatch of size 4", ds_engine_dispatch(emu.other, &d), DS_ABI_MISMATCH,
           words);
    d.size = sizeof d;
    slots[1].size = sizeof slots[1] + 8;
    words_of_size(words, sizeof words, "dispatch.slots[1]", (uint32_t)(sizeof slots[1] + 8),
                  sizeof slots[1], "ds_slot");
    expect("prepare with slots[1] of another size", ds_engine_prepare(engine, &d, &p),
           DS_ABI_MISMATCH, words);
    slots[1].size = sizeof slots[1];
    slots[0].size = 16;
    words_of_size(words, sizeof words, "dispatch.slots[0]", 16, sizeof slots[0], "ds_slot");
    expect("prepare with slots[0] of another size (the stride is not trusted)",
           ds_engine_prepare(engine, &d, &p), DS_ABI_MISMATCH, words);
    slots[0].size = sizeof slots[0];
    slots[1].flags |= 1u << 4;
    expect("prepare with an unknown slot flag", ds_engine_prepare(engine, &d, &p), DS_BAD_INPUT,
           "dispatch.slots[1].flags has unknown bits 0x10");
    slots[1].flags &= ~(1u << 4);
    d.reasons = 1u << 7;
    expect("prepare with an unknown reason", ds_engine_prepare(engine, &d, &p), DS_BAD_INPUT,
           "dispatch.reasons has unknown bits 0x80");
    d.reasons = 0;

    p.n_carries = 0xdead;
    p.reserved2 = 0xbeef;
    expect("prepare run 305", ds_engine_prepare(engine, &d, &p), DS_OK, NULL);
    check("bound, two plans", p.mode == DS_MODE_BOUND && p.n_bindings == 2, NULL);
    check("the output's reserved fields are written 0, and no carries with nothing in flight",
          p.n_carries == 0 && p.reserved2 == 0 && plans[0].reserved == 0 && plans[1].reserved == 0,
          NULL);

    static uint8_t data[0xe420], masks[0xe420];
    memset(data, 0, sizeof data);
    memset(masks, 0, sizeof masks);
    uint32_t v = 0xc0ffee11u;
    memcpy(data + 0xe404, &v, 4);
    masks[0xe404] = 1;
    ds_holder_run h;
    memset(&h, 0, sizeof h);
    h.data = data;
    h.data_bytes = sizeof data;
    h.masks = masks;
    h.mask_bytes = sizeof masks;
    h.reserved = 2;
    ds_completion c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.index = p.index;
    c.holders = &h;
    c.n_holders = 1;
    expect("complete with a holder's reserved 2", ds_engine_complete(engine, &c), DS_BAD_INPUT,
           "completion.holders[0].reserved is 2; it must be 0");
    h.reserved = 0;
    ds_site sites[1] = {{0x400003e19210ull, DS_ACCESS_GLOBAL, 1, 4, 0}};
    static uint32_t iwords[16384];
    uint64_t n_words = 0;
    expect("instrumentation init",
           ds_engine_instrumentation_init(engine, 1, 16, 8, 0x700000000ull, iwords, 16384, &n_words),
           DS_OK, NULL);
    ds_instrumentation in;
    memset(&in, 0, sizeof in);
    in.size = sizeof in;
    in.n_sites = 1;
    in.sites = sites;
    in.width = 16;
    in.height = 8;
    in.words = iwords;
    in.n_words = n_words;
    c.instrumentation = &in;
    sites[0].reserved = 3;
    expect("complete with a site's reserved 3", ds_engine_complete(engine, &c), DS_BAD_INPUT,
           "instrumentation.sites[0].reserved is 3; it must be 0");
    sites[0].reserved = 0;
    sites[0].store = 2;
    expect("complete with a site's store 2", ds_engine_complete(engine, &c), DS_BAD_INPUT,
           "instrumentation.sites[0].store is 2");
    sites[0].store = 1;
    c.instrumentation = NULL;

    /* ---- 3. a callback calling back into its own engine: DS_ORDER, never a deadlock ---- */
    expect("complete run 305 (its write callback calls back)", ds_engine_complete(engine, &c),
           DS_OK, NULL);
    uint32_t got = 0;
    memcpy(&got, pages + 0xe404, 4);
    check("the write-back reached the host's page", got == v && emu.writes >= 1, NULL);
    check("ds_engine_apply from inside the write callback is DS_ORDER",
          emu.called_back > 0 && emu.apply_status == DS_ORDER &&
              strstr(emu.apply_message, "ds_engine_apply was called on engine") != NULL &&
              strstr(emu.apply_message, "write callback (ds_engine_complete)") != NULL,
          emu.apply_message);
    check("ds_engine_destroy from inside the write callback is DS_ORDER",
          emu.destroy_status == DS_ORDER && strstr(emu.destroy_message, "ds_engine_destroy") != NULL,
          emu.destroy_message);
    check("ds_engine_report_json from inside the write callback is DS_ORDER",
          emu.report_status == DS_ORDER, NULL);
    check("another engine from inside the write callback answers (no report yet)",
          emu.other_status == DS_NOT_READY, NULL);
    ds_mode mode;
    expect("the engine still answers after", ds_engine_report_mode(engine, &mode), DS_OK, NULL);

    /* ---- 4. report pointers are each thread's own ---- */
    ds_dispatch cpu_d = d;
    cpu_d.program = 0x4000;
    expect("a dispatch on the other engine", ds_engine_dispatch(emu.other, &cpu_d), DS_OK, NULL);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    struct reader readers[2];
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        readers[i].engine = emu.other;
        readers[i].id = i;
        readers[i].barrier = &barrier;
        readers[i].dispatch = &cpu_d;
        pthread_create(&threads[i], NULL, read_reports, &readers[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&barrier);
    char detail[128];
    snprintf(detail, sizeof detail, "%d and %d rounds changed under a reader", readers[0].bad,
             readers[1].bad);
    check("each thread's report pointer holds its report while the other dispatches and reads",
          readers[0].bad == 0 && readers[1].bad == 0, detail);
    check("the engine was destroyed by the second thread", readers[1].last == DS_OK, NULL);

    expect("destroy", ds_engine_destroy(engine), DS_OK, NULL);
    munmap(pages, BYTES);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
