/* Nothing outside the library at run time, from C (issue 40): an emulator on a player's machine has
 * its GPU driver and nothing else. This program checks that its PATH finds no SPIRV-Tools
 * executable (tests/c_abi.rs runs it with a PATH of one empty folder) and refuses itself execve (a
 * seccomp filter: no process can be started from it, by any path). Then, on a Vulkan device of its
 * own made with what the C ABI checks (as examples/common/ds_host.hpp makes it), the engine's calls
 * run: ds_engine_create_vulkan_host over this program's mmap'ed pages (the replay module built, its
 * pipeline created), a bound dispatch and a device-addressed one (the chunk table placed on the
 * device) through prepare and complete; and ds_engine_create_vulkan, whose own replay runs a
 * dispatch's accesses on the device. Prints one line per check and "N failures" last; exits 3
 * where there is no Vulkan device to make. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vulkan/vulkan.h>

#include "dispatchscope.h"

extern char **environ;

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

/* No directory of PATH holds a SPIRV-Tools executable. */
static int path_finds_no_spirv_tools(void) {
    static const char *tools[] = {"spirv-val", "spirv-opt", "spirv-link", "spirv-as", "spirv-dis"};
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "");
    for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
            char file[4200];
            snprintf(file, sizeof file, "%s/%s", dir, tools[i]);
            if (access(file, F_OK) == 0) {
                printf("PATH holds %s\n", file);
                return 0;
            }
        }
    }
    return 1;
}

#if defined(__x86_64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* execve and execveat fail with EPERM from now on; a system call of another architecture kills the
 * process. 1 when the filter is in place. */
static int forbid_exec(void) {
#ifdef THIS_AUDIT_ARCH
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execve, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execveat, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 0;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 0;
    /* The filter holds: /bin/sh cannot be started. */
    pid_t pid;
    char *argv[] = {"sh", "-c", "true", NULL};
    int r = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
    if (r == 0) {
        int status = 0;
        waitpid(pid, &status, 0);
        return 0;
    }
    return r == EPERM;
#else
    return 0;
#endif
}

/* The emulator's own Vulkan objects. */
struct vk {
    VkInstance instance;
    VkPhysicalDevice physical;
    uint32_t family;
    VkDevice device;
    VkQueue queue;
    VkPhysicalDeviceVulkan12Features v12;
    VkPhysicalDeviceFeatures2 features;
    const char *extensions[1];
};

static int has_extension(VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL);
    VkExtensionProperties *props = calloc(n ? n : 1, sizeof *props);
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n, props);
    int found = 0;
    for (uint32_t i = 0; i < n && !found; i++) found = strcmp(props[i].extensionName, name) == 0;
    free(props);
    return found;
}

/* The first Vulkan 1.2 device with a compute queue and VK_EXT_external_memory_host, made with what
 * the C ABI checks. 0 where there is none. */
static int make_device(struct vk *v) {
    memset(v, 0, sizeof *v);
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "vulkan_host.c",
                             .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                .pApplicationInfo = &app};
    if (vkCreateInstance(&ici, NULL, &v->instance) != VK_SUCCESS) return 0;
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(v->instance, &n, NULL);
    VkPhysicalDevice devices[16];
    if (n > 16) n = 16;
    vkEnumeratePhysicalDevices(v->instance, &n, devices);
    v->extensions[0] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
    for (uint32_t d = 0; d < n && !v->physical; d++) {
        VkPhysicalDeviceProperties props;
        vkGetPhysicalDeviceProperties(devices[d], &props);
        if (props.apiVersion < VK_API_VERSION_1_2 || !has_extension(devices[d], v->extensions[0]))
            continue;
        uint32_t nq = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(devices[d], &nq, NULL);
        VkQueueFamilyProperties families[16];
        if (nq > 16) nq = 16;
        vkGetPhysicalDeviceQueueFamilyProperties(devices[d], &nq, families);
        for (uint32_t f = 0; f < nq; f++) {
            if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                v->physical = devices[d];
                v->family = f;
                break;
            }
        }
    }
    if (!v->physical) return 0;
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = v->family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &priority};
    v->v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    v->v12.bufferDeviceAddress = VK_TRUE;
    v->features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    v->features.pNext = &v->v12;
    v->features.features.shaderInt64 = VK_TRUE;
    v->features.features.shaderStorageBufferArrayDynamicIndexing = VK_TRUE;
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &v->features,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = 1,
                              .ppEnabledExtensionNames = v->extensions};
    if (vkCreateDevice(v->physical, &dci, NULL, &v->device) != VK_SUCCESS) return 0;
    vkGetDeviceQueue(v->device, v->family, 0, &v->queue);
    return 1;
}

static ds_vulkan_device handles_of(const struct vk *v) {
    ds_vulkan_device h;
    memset(&h, 0, sizeof h);
    h.size = sizeof h;
    h.get_instance_proc_addr = (void *)&vkGetInstanceProcAddr;
    h.instance = v->instance;
    h.physical_device = v->physical;
    h.device = v->device;
    h.queue = v->queue;
    h.queue_family_index = v->family;
    h.api_version = VK_API_VERSION_1_2;
    h.enabled_extensions = v->extensions;
    h.n_enabled_extensions = 1;
    h.enabled_features = &v->features;
    return h;
}

/* The emulator's side of host mode. */
struct emulator {
    int writes, hand_offs;
};

static int32_t on_write(void *user, uint64_t host, const uint8_t *src, uint64_t n) {
    ((struct emulator *)user)->writes++;
    memcpy((void *)(uintptr_t)host, src, (size_t)n);
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
    (void)start;
    (void)end;
    (void)host;
    ((struct emulator *)user)->hand_offs++;
    return 0;
}

#define GUEST 0x200000000ull
#define BYTES 0x20000ull

/* ds_engine_create_vulkan_host, and a bound and a device-addressed dispatch through it. */
static void host_engine(const ds_vulkan_device *handles) {
    struct emulator emu;
    memset(&emu, 0, sizeof emu);
    uint8_t *pages = mmap(NULL, BYTES, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    check("mmap", pages != MAP_FAILED, NULL);
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
    expect("create vulkan host", ds_engine_create_vulkan_host(handles, &cb, &engine), DS_OK);
    if (!engine) return;

    ds_event e;
    memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.kind = DS_EVENT_RESERVE;
    e.start = GUEST;
    e.end = GUEST + BYTES;
    e.host_address = (uint64_t)(uintptr_t)pages;
    e.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED;
    expect("reserve the program's own pages", ds_engine_apply(engine, &e), DS_OK);

    /* Run 305, bound: the emulator's device stores one word through the member. */
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
    p.bindings_capacity = 4;
    expect("prepare run 305", ds_engine_prepare(engine, &d, &p), DS_OK);
    check("bound, one holder", p.mode == DS_MODE_BOUND && p.n_bindings == 2, NULL);
    static uint8_t data[0xe420], masks[0xe420];
    uint32_t v = 0xc0ffee11u;
    memcpy(data + 0xe404, &v, 4);
    masks[0xe404] = 1;
    ds_holder_run h;
    memset(&h, 0, sizeof h);
    h.slot = 0;
    h.data = data;
    h.data_bytes = sizeof data;
    h.masks = masks;
    h.mask_bytes = sizeof masks;
    ds_completion c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.index = p.index;
    c.holders = &h;
    c.n_holders = 1;
    expect("complete run 305", ds_engine_complete(engine, &c), DS_OK);
    uint32_t got;
    memcpy(&got, pages + 0xe404, 4);
    check("the write-back word is in the program's page", got == v && emu.writes == 1, NULL);

    /* Device-addressed: the pages imported into the device, the table placed there. */
    memset(&d, 0, sizeof d);
    d.size = sizeof d;
    d.program = 0x74005b854a00ull;
    d.reasons = 1; /* D753 */
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = plans;
    p.bindings_capacity = 4;
    expect("prepare device-addressed", ds_engine_prepare(engine, &d, &p), DS_OK);
    check("device-addressed, with a table on the device",
          p.mode == DS_MODE_DEVICE_ADDRESSED && p.table_address != 0 && p.mark_words > 0 &&
              p.push[30] == (uint32_t)p.table_address,
          NULL);
    static uint32_t marks[1 << 16];
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.index = p.index;
    c.marks = marks;
    c.n_marks = p.mark_words <= (1 << 16) ? p.mark_words : 0;
    expect("complete device-addressed", ds_engine_complete(engine, &c), DS_OK);
    ds_mode mode;
    expect("report mode", ds_engine_report_mode(engine, &mode), DS_OK);
    check("the report says device-addressed", mode == DS_MODE_DEVICE_ADDRESSED, NULL);
    expect("destroy the host engine", ds_engine_destroy(engine), DS_OK);
    munmap(pages, BYTES);
}

static ds_status apply_json(ds_engine engine, const char *json) {
    return ds_engine_apply_json(engine, (const uint8_t *)json, strlen(json));
}

/* ds_engine_create_vulkan: the engine's own replay runs a dispatch's accesses on the device. */
static void replay_engine(const ds_vulkan_device *handles) {
    ds_engine engine = 0;
    expect("create vulkan", ds_engine_create_vulkan(handles, &engine), DS_OK);
    if (!engine) return;
    expect("reserve",
           apply_json(engine, "{\"event\":\"reserve\",\"range\":{\"start\":\"0x210000000\","
                              "\"end\":\"0x210001000\"},\"readable\":true,\"writable\":true,"
                              "\"committed\":true,\"backing\":\"private\"}"),
           DS_OK);
    uint32_t words[37];
    for (uint32_t i = 0; i < 37; i++) words[i] = 0x3000u + i;
    expect("contents",
           ds_engine_load_contents(engine, 0x210000100ull, (const uint8_t *)words, sizeof words),
           DS_OK);
    /* Run 305 inside: a 16-byte load of the 0x94-byte range, a store through the four-byte range
     * inside it, a load of the stored word. */
    const char *dispatch =
        "{\"program\":\"0x400003d88400\",\"label\":\"run 305 on the device\",\"slots\":["
        "{\"slot\":0,\"base\":\"0x210000100\",\"size_bytes\":\"0x94\",\"written\":false},"
        "{\"slot\":1,\"base\":\"0x210000140\",\"size_bytes\":\"0x4\",\"written\":true}],"
        "\"accesses\":["
        "{\"wave\":0,\"lane\":0,\"pc\":\"0x400003d88480\",\"kind\":\"untyped-buffer\","
        "\"op\":\"load\",\"size_bytes\":16,\"slot\":0,\"offset\":\"0x30\"},"
        "{\"wave\":0,\"lane\":0,\"pc\":\"0x400003d884a0\",\"kind\":\"untyped-buffer\","
        "\"op\":\"store\",\"size_bytes\":4,\"slot\":1,\"offset\":\"0x0\",\"values\":[12648430]},"
        "{\"wave\":0,\"lane\":1,\"pc\":\"0x400003d884b0\",\"kind\":\"untyped-buffer\","
        "\"op\":\"load\",\"size_bytes\":4,\"slot\":0,\"offset\":\"0x40\"}]}";
    expect("dispatch on the device",
           ds_engine_dispatch_json(engine, (const uint8_t *)dispatch, strlen(dispatch)), DS_OK);
    uint32_t got = 0;
    expect("read guest", ds_engine_read_guest(engine, 0x210000140ull, (uint8_t *)&got, 4), DS_OK);
    check("the replay's store is in guest memory", got == 12648430u, NULL);
    const char *json = NULL;
    size_t len = 0;
    expect("report JSON", ds_engine_report_json(engine, &json, &len), DS_OK);
    int loads_ok = json && strstr(json, "\"values\":[12300,12301,12302,12303]") != NULL;
    check("the loads read what was there", loads_ok, loads_ok ? NULL : json);
    expect("destroy the replay engine", ds_engine_destroy(engine), DS_OK);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    check("PATH finds no SPIRV-Tools executable", path_finds_no_spirv_tools(), getenv("PATH"));
    check("execve is refused", forbid_exec(), NULL);
    struct vk v;
    if (!make_device(&v)) {
        printf("no Vulkan device with what the C ABI needs\n");
        return 3;
    }
    ds_vulkan_device handles = handles_of(&v);
    host_engine(&handles);
    replay_engine(&handles);
    vkDestroyDevice(v.device, NULL);
    vkDestroyInstance(v.instance, NULL);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
