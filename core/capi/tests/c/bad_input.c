/* Bad input through the C ABI, from C: every case a status and a message, never a crash.
 * Built and run by tests/c_abi.rs; prints one line per check and exits 1 on the first failure. */
#include <stdio.h>
#include <string.h>

#include "dispatchscope.h"

static int failures = 0;

static void expect(const char *what, ds_status got, ds_status want) {
    const char *message = ds_last_error();
    int ok = got == want && (want == DS_OK ? message[0] == '\0' : message[0] != '\0');
    printf("%s %s: status %d (want %d): %s\n", ok ? "ok" : "FAIL", what, (int)got, (int)want,
           message);
    if (!ok) failures++;
}

int main(void) {
    ds_engine engine = 0;
    ds_limits limits;
    expect("default limits", ds_limits_default(&limits), DS_OK);
    expect("create with null limits", ds_engine_create(NULL, &engine), DS_NULL_POINTER);
    expect("create with null out", ds_engine_create(&limits, NULL), DS_NULL_POINTER);
    limits.min_storage_buffer_offset_alignment = 3;
    expect("create with alignment 3", ds_engine_create(&limits, &engine), DS_BAD_INPUT);
    limits.min_storage_buffer_offset_alignment = 16;
    limits.name = "c-test device";
    expect("create", ds_engine_create(&limits, &engine), DS_OK);

    ds_mode mode;
    expect("mode before any dispatch", ds_engine_report_mode(engine, &mode), DS_NOT_READY);

    const char *truncated = "{\"program\":\"0x1000\",\"slots\":[{\"slot\":0,";
    expect("truncated JSON dispatch",
           ds_engine_dispatch_json(engine, (const uint8_t *)truncated, strlen(truncated)),
           DS_BAD_INPUT);
    expect("null JSON", ds_engine_dispatch_json(engine, NULL, 4), DS_NULL_POINTER);
    const char *event = "{\"event\":\"reserve\",\"range\":{\"start\":\"0x10000\",\"end\":\"0x11000\"}";
    expect("truncated JSON event", ds_engine_apply_json(engine, (const uint8_t *)event, strlen(event)),
           DS_BAD_INPUT);

    ds_dispatch d;
    memset(&d, 0, sizeof d);
    d.size = sizeof d;
    d.program = 0x1000;
    d.slots = NULL;
    d.n_slots = 3;
    expect("slots null with a count", ds_engine_dispatch(engine, &d), DS_NULL_POINTER);
    expect("null dispatch", ds_engine_dispatch(engine, NULL), DS_NULL_POINTER);

    ds_slot slot;
    memset(&slot, 0, sizeof slot);
    slot.size = sizeof slot;
    slot.slot = 0;
    slot.flags = DS_SLOT_WRITTEN | DS_SLOT_RESOLVED;
    slot.base = 0x10000;
    slot.size_bytes = 0x100;
    slot.alias_of = DS_NO_ALIAS;
    slot.format = 99;
    d.slots = &slot;
    d.n_slots = 1;
    expect("unknown format", ds_engine_dispatch(engine, &d), DS_BAD_INPUT);
    slot.format = DS_FORMAT_NONE;
    d.reasons = 1u << 9;
    expect("unknown reason bit", ds_engine_dispatch(engine, &d), DS_BAD_INPUT);
    d.reasons = 0;
    expect("a bound dispatch", ds_engine_dispatch(engine, &d), DS_OK);
    expect("its mode", ds_engine_report_mode(engine, &mode), DS_OK);
    if (mode != DS_MODE_BOUND) {
        printf("FAIL mode is %d, want bound\n", (int)mode);
        failures++;
    }
    expect("mode into null", ds_engine_report_mode(engine, NULL), DS_NULL_POINTER);
    const char *json = NULL;
    size_t len = 0;
    expect("report JSON", ds_engine_report_json(engine, &json, &len), DS_OK);
    if (json == NULL || strlen(json) != len || strstr(json, "\"mode\":\"bound\"") == NULL) {
        printf("FAIL report JSON: %s\n", json ? json : "(null)");
        failures++;
    }

    expect("a made-up handle", ds_engine_dispatch(engine + 12345, &d), DS_INVALID_HANDLE);
    expect("the null handle", ds_engine_dispatch(0, &d), DS_INVALID_HANDLE);
    expect("listen on a bad address", ds_engine_listen(engine, "not an address", NULL, NULL, NULL),
           DS_BAD_INPUT);
    expect("end a capture never begun", ds_engine_capture_end(engine), DS_NOT_READY);
    expect("destroy", ds_engine_destroy(engine), DS_OK);
    expect("destroy again", ds_engine_destroy(engine), DS_INVALID_HANDLE);
    expect("use after destroy", ds_engine_dispatch(engine, &d), DS_INVALID_HANDLE);

    printf("%d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
