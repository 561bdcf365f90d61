/* The host path through the C ABI, from C (issue 29): guest memory is this program's own mmap'ed
 * pages, events are structs, and each dispatch goes prepare, "the emulator's device", complete.
 * Bad input (null pointers, wrong sizes, out of order, a callback that fails) is a status and a
 * message. Built and run by tests/c_abi.rs; prints one line per check and "N failures" last. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "dispatchscope.h"

static int failures = 0;

static void check(const char *what, int ok, const char *detail) {
    printf("%s %s%s%s\n", ok ? "ok" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
    if (!ok) failures++;
}

static void expect(const char *what, ds_status got, ds_status want) {
    const char *message = ds_last_error();
    int ok = got == want && (want == DS_OK ? message[0] == '\0' : message[0] != '\0');
    printf("%s %s: status %d (want %d): %s\n", ok ? "ok" : "FAIL", what, (int)got, (int)want,
           message);
    if (!ok) failures++;
}

/* The emulator's side. */
struct emulator {
    int writes, commits, releases, hand_offs;
    int fail_commit;
};

static int32_t on_write(void *user, uint64_t host, const uint8_t *src, uint64_t n) {
    ((struct emulator *)user)->writes++;
    memcpy((void *)(uintptr_t)host, src, (size_t)n);
    return 0;
}
static int32_t on_commit(void *user, uint64_t host, uint64_t n) {
    struct emulator *e = user;
    (void)host;
    (void)n;
    e->commits++;
    return e->fail_commit ? -5 : 0;
}
static int32_t on_release(void *user, uint64_t host, uint64_t n) {
    ((struct emulator *)user)->releases++;
    return mprotect((void *)(uintptr_t)host, (size_t)n, PROT_READ | PROT_WRITE);
}
static int32_t on_hand_off(void *user, uint64_t start, uint64_t end, uint64_t host) {
    (void)start;
    (void)end;
    (void)host;
    ((struct emulator *)user)->hand_offs++;
    return 0;
}

#define GUEST 0x200000000ull
#define SHARED_GUEST 0x300000000ull
#define LAZY_GUEST 0x400000000ull
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

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    struct emulator emu;
    memset(&emu, 0, sizeof emu);
    uint8_t *pages = mmap(NULL, BYTES, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    uint8_t *shared = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    uint8_t *lazy = mmap(NULL, BYTES, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    check("mmap", pages != MAP_FAILED && shared != MAP_FAILED && lazy != MAP_FAILED, NULL);
    check("abi version", ds_abi_version() == DS_ABI_VERSION, NULL);

    ds_limits limits;
    expect("default limits", ds_limits_default(&limits), DS_OK);
    ds_host_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.size = sizeof cb;
    cb.abi_version = DS_ABI_VERSION;
    cb.user = &emu;
    cb.write = on_write;
    cb.commit = on_commit;
    cb.release_guards = on_release;
    ds_engine engine = 0;
    expect("create without hand_off", ds_engine_create_host(&limits, &cb, &engine),
           DS_NULL_POINTER);
    cb.hand_off = on_hand_off;
    cb.size = 8;
    expect("create with a wrong callbacks size", ds_engine_create_host(&limits, &cb, &engine),
           DS_ABI_MISMATCH);
    cb.size = sizeof cb;
    cb.abi_version = 1;
    expect("create with another ABI version", ds_engine_create_host(&limits, &cb, &engine),
           DS_ABI_MISMATCH);
    cb.abi_version = DS_ABI_VERSION;
    expect("create host", ds_engine_create_host(&limits, &cb, &engine), DS_OK);

    uint32_t rwc = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED;
    ds_event e = reserve(GUEST, NULL, rwc);
    expect("reserve without a host address", ds_engine_apply(engine, &e), DS_BAD_INPUT);
    e = reserve(GUEST, pages + 1, rwc);
    expect("reserve at an unaligned host address", ds_engine_apply(engine, &e), DS_BAD_INPUT);
    e = reserve(GUEST, pages, rwc);
    e.size = 4;
    expect("event with a wrong size", ds_engine_apply(engine, &e), DS_ABI_MISMATCH);
    e.size = sizeof e;
    expect("reserve", ds_engine_apply(engine, &e), DS_OK);
    e.kind = 99;
    expect("unknown event kind", ds_engine_apply(engine, &e), DS_BAD_INPUT);
    /* The events say private; the kernel says shared. */
    e = reserve(SHARED_GUEST, shared, rwc);
    expect("reserve the shared pages as private", ds_engine_apply(engine, &e), DS_OK);
    expect("null event", ds_engine_apply(engine, NULL), DS_NULL_POINTER);

    /* Run 305: a 0x20-byte written range that a 0xe40f-byte written range ends inside. */
    ds_slot slots[2];
    memset(slots, 0, sizeof slots);
    slots[0].size = sizeof slots[0];
    slots[0].slot = 0;
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
    ds_prepared p;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = plans;
    p.bindings_capacity = 1;
    expect("prepare with too small a bindings array", ds_engine_prepare(engine, &d, &p),
           DS_BAD_INPUT);
    p.bindings_capacity = 4;
    p.size = 3;
    expect("prepare with a wrong size", ds_engine_prepare(engine, &d, &p), DS_ABI_MISMATCH);
    p.size = sizeof p;
    expect("prepare with a null out", ds_engine_prepare(engine, &d, NULL), DS_NULL_POINTER);
    expect("prepare run 305", ds_engine_prepare(engine, &d, &p), DS_OK);
    check("bound", p.mode == DS_MODE_BOUND && p.n_bindings == 2, NULL);
    check("one holder, the member 0xe400 into it",
          plans[0].holder == 0 && plans[1].holder == 0 && plans[1].offset_bytes == 0xe400 &&
              plans[1].range_bytes == 0x20 && plans[0].buffer_end - plans[0].buffer_start == 0xe420 &&
              plans[1].mask_offset_bytes == 0xe400,
          NULL);
    /* A second dispatch in flight: its holder reads what the first one's holder writes, so it is
       handed one carry from that holder (it lands in guest memory only at the first's complete). */
    ds_slot_plan plans2[4];
    ds_prepared p2;
    memset(&p2, 0, sizeof p2);
    p2.size = sizeof p2;
    p2.bindings = plans2;
    p2.bindings_capacity = 4;
    expect("prepare a second dispatch in flight", ds_engine_prepare(engine, &d, &p2), DS_OK);
    uint32_t in_flight = 0;
    expect("in flight", ds_engine_in_flight(engine, &in_flight), DS_OK);
    check("two in flight, the second next", in_flight == 2 && p2.index == p.index + 1, NULL);
    ds_carry carries[2];
    uint32_t n_carries = 0;
    expect("carries into a too small array", ds_engine_prepared_carries(engine, p2.index, carries, 0, &n_carries),
           DS_BAD_INPUT);
    expect("carries", ds_engine_prepared_carries(engine, p2.index, carries, 2, &n_carries), DS_OK);
    check("one carry: the first dispatch's holder, whole",
          p2.n_carries == 1 && n_carries == 1 && carries[0].from == DS_CARRY_FROM_HOLDER &&
              carries[0].after == p.index && carries[0].from_slot == 0 && carries[0].offset == 0 &&
              carries[0].from_offset == 0 && carries[0].bytes == 0xe420,
          NULL);
    ds_completion early;
    memset(&early, 0, sizeof early);
    early.size = sizeof early;
    early.index = p2.index;
    expect("complete the second before the first", ds_engine_complete(engine, &early), DS_ORDER);

    /* The emulator's device stored one word through the member. */
    static uint8_t data[0xe420], masks[0xe420];
    memset(data, 0, sizeof data);
    memset(masks, 0, sizeof masks);
    uint32_t v = 0xc0ffee11u;
    memcpy(data + 0xe404, &v, 4);
    masks[0xe404] = 1;
    ds_holder_run h;
    memset(&h, 0, sizeof h);
    h.slot = 0;
    h.data = data;
    h.data_bytes = 0x10; /* too short */
    h.masks = masks;
    h.mask_bytes = sizeof masks;
    ds_completion c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.index = p.index;
    c.holders = &h;
    c.n_holders = 1;
    expect("complete with a short holder", ds_engine_complete(engine, &c), DS_BAD_INPUT);
    h.data_bytes = sizeof data;
    c.index = p.index + 7;
    expect("complete another index", ds_engine_complete(engine, &c), DS_ORDER);
    c.index = p.index;
    expect("complete run 305", ds_engine_complete(engine, &c), DS_OK);
    uint32_t got;
    memcpy(&got, pages + 0xe404, 4);
    check("the write-back word is in the host's page, through the emulator",
          got == v && emu.writes == 1, NULL);
    expect("complete twice", ds_engine_complete(engine, &c), DS_ORDER);
    expect("abandon the second", ds_engine_abandon(engine, p2.index), DS_OK);
    expect("in flight", ds_engine_in_flight(engine, &in_flight), DS_OK);
    check("none in flight", in_flight == 0, NULL);
    expect("null completion", ds_engine_complete(engine, NULL), DS_NULL_POINTER);

    /* O7: a member 0x24 into its holder, not a multiple of 0x10. */
    slots[1].base = GUEST + 0x24;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = plans;
    p.bindings_capacity = 4;
    expect("prepare an O7 refusal", ds_engine_prepare(engine, &d, &p), DS_OK);
    check("refused, nothing to bind", p.mode == DS_MODE_REFUSED && p.n_refusals == 1 && p.n_bindings == 0, NULL);
    c.index = p.index;
    c.n_holders = 0;
    c.holders = NULL;
    expect("complete the refusal", ds_engine_complete(engine, &c), DS_OK);
    ds_mode mode;
    expect("report mode", ds_engine_report_mode(engine, &mode), DS_OK);
    check("the report says refused", mode == DS_MODE_REFUSED, NULL);

    /* A device-addressed dispatch: the table and the helper's push words. */
    memset(&d, 0, sizeof d);
    d.size = sizeof d;
    d.program = 0x74005b854a00ull;
    d.reasons = 1; /* D753 */
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = plans;
    p.bindings_capacity = 4;
    expect("prepare device-addressed", ds_engine_prepare(engine, &d, &p), DS_OK);
    check("device-addressed, with a table",
          p.mode == DS_MODE_DEVICE_ADDRESSED && p.table_address != 0 && p.mark_words > 0 &&
              p.push[30] == (uint32_t)p.table_address && (p.push_mask & (3u << 30)) == (3u << 30),
          NULL);
    uint32_t marks[4096];
    memset(marks, 0, sizeof marks);
    c.index = p.index;
    c.marks = marks;
    c.n_marks = p.mark_words + 1;
    expect("complete with the wrong number of mark words", ds_engine_complete(engine, &c),
           DS_BAD_INPUT);
    c.n_marks = p.mark_words;

    /* Its instrumented buffer: the layout from the engine, a device's results written by hand (one
     * store at site 1 escaped, at an address no reservation holds), decoded by complete. */
    static const ds_site sites[2] = {
        {0x74005b854a10ull, DS_ACCESS_GLOBAL, 0, 4, 0},
        {0x74005b854a24ull, DS_ACCESS_GLOBAL, 1, 4, 0},
    };
    uint64_t n_words = 0;
    expect("instrumentation size query",
           ds_engine_instrumentation_init(engine, 2, 16, 8, 0x700000000ull, NULL, 0, &n_words), DS_OK);
    check("the layout has a header, sites, logs and a heat map", n_words > 60 + 2 * 16, NULL);
    static uint32_t words[16384];
    expect("instrumentation init into too little room",
           ds_engine_instrumentation_init(engine, 2, 16, 8, 0x700000000ull, words, n_words - 1, &n_words),
           DS_BAD_INPUT);
    expect("instrumentation init with a grid of no whole workgroups",
           ds_engine_instrumentation_init(engine, 2, 15, 8, 0x700000000ull, words, 16384, &n_words),
           DS_BAD_INPUT);
    expect("instrumentation init",
           ds_engine_instrumentation_init(engine, 2, 16, 8, 0x700000000ull, words, 16384, &n_words), DS_OK);
    check("the buffer starts with the magic", words[0] == 0x44534931u && words[1] == 2, NULL);
    const uint32_t escapes_at = 60 + 2 * 16;
    words[16] = 1;                      /* one escape logged */
    words[escapes_at + 0] = 0;          /* workgroup */
    words[escapes_at + 1] = 3;          /* local lane */
    words[escapes_at + 2] = 1;          /* site */
    words[escapes_at + 3] = 0x10;       /* address, low */
    words[escapes_at + 4] = 0x6;        /* address, high: 0x600000010, in no reservation */
    words[escapes_at + 5] = 4u | (1u << 16);
    words[escapes_at + 6] = 0xf;
    ds_instrumentation in;
    memset(&in, 0, sizeof in);
    in.size = sizeof in - 8;
    in.n_sites = 2;
    in.sites = sites;
    in.width = 16;
    in.height = 8;
    in.words = words;
    in.n_words = n_words;
    c.instrumentation = &in;
    expect("complete with a ds_instrumentation of the wrong size", ds_engine_complete(engine, &c),
           DS_ABI_MISMATCH);
    in.size = sizeof in;
    ds_site bad[2] = {sites[0], sites[1]};
    bad[1].kind = 99;
    in.sites = bad;
    expect("complete with a site of no kind", ds_engine_complete(engine, &c), DS_BAD_INPUT);
    in.sites = sites;
    in.n_words = 8;
    expect("complete with a short buffer", ds_engine_complete(engine, &c), DS_BAD_INPUT);
    in.n_words = n_words;
    expect("complete device-addressed", ds_engine_complete(engine, &c), DS_OK);
    c.instrumentation = NULL;
    const char *json = NULL;
    size_t len = 0;
    expect("report JSON", ds_engine_report_json(engine, &json, &len), DS_OK);
    check("the instrumented section names the escape's pc",
          json && strstr(json, "\"instrumented\"") && strstr(json, "\"pc\":\"0x74005b854a24\"") &&
              strstr(json, "\"class\":\"no-reservation\"") && strstr(json, "\"backend\":\"emulator\""),
          json);
    check("the shared pages are refused by name (real-mapping)",
          json && strstr(json, "\"real-mapping\"") && strstr(json, "shared, although the events say private"),
          NULL);

    uint8_t buf[4];
    expect("read guest", ds_engine_read_guest(engine, GUEST + 0xe404, buf, 4), DS_OK);
    check("read guest gives the host's bytes", memcmp(buf, &v, 4) == 0, NULL);
    expect("read guest into null", ds_engine_read_guest(engine, GUEST, NULL, 4), DS_NULL_POINTER);

    /* A callback that fails: the emulator refuses to commit a lazy reservation. Only what needs
     * that reservation is refused (M2 failed for it alone: it is left out by name), and the next
     * dispatch asks again. */
    e = reserve(LAZY_GUEST, lazy, DS_EVENT_READABLE | DS_EVENT_WRITABLE);
    expect("reserve uncommitted", ds_engine_apply(engine, &e), DS_OK);
    emu.fail_commit = 1;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = plans;
    p.bindings_capacity = 4;
    expect("prepare when commit fails", ds_engine_prepare(engine, &d, &p), DS_OK);
    ds_completion done;
    memset(&done, 0, sizeof done);
    done.size = sizeof done;
    done.index = p.index;
    expect("complete when commit failed", ds_engine_complete(engine, &done), DS_OK);
    json = NULL;
    expect("report JSON", ds_engine_report_json(engine, &json, &len), DS_OK);
    check("the lazy run is left out, naming the callback",
          json && strstr(json, "\"host-callback\"") && strstr(json, "commit callback returned -5") &&
              strstr(json, "the host's commit of "),
          json);
    emu.fail_commit = 0;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = plans;
    p.bindings_capacity = 4;
    expect("prepare after the commit works again", ds_engine_prepare(engine, &d, &p), DS_OK);
    check("the emulator committed the lazy run", emu.commits >= 2, NULL);
    expect("abandon", ds_engine_abandon(engine, p.index), DS_OK);
    expect("abandon twice", ds_engine_abandon(engine, p.index), DS_ORDER);
    expect("destroy", ds_engine_destroy(engine), DS_OK);
    expect("prepare on a destroyed engine", ds_engine_prepare(engine, &d, &p), DS_INVALID_HANDLE);

    munmap(pages, BYTES);
    munmap(shared, BYTES);
    munmap(lazy, BYTES);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
