#!/usr/bin/env bash
# Runs every test of dispatchscope, installing what the tests need from the system first.
# This is the README's test command; .ci/run runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- system packages the tests need (Debian/Ubuntu) ---------------------------------------------
# lavapipe (Vulkan on the CPU) and the loader, Xvfb for the real-window test, ImageMagick for its
# screenshot, the Khronos validation layer and Debian's spirv-val and spirv-link for the Vulkan
# backend's tests, LLVM 14's llvm-mc as the RDNA2 decoder's oracle, and g++, CMake and the Vulkan
# headers for the C++ programs that embed the C ABI (examples/cpp-target, and examples/emulator-host,
# whose modules spirv-as assembles and spirv-link links).
packages=(mesa-vulkan-drivers libvulkan1 libvulkan-dev xvfb x11-utils xdotool imagemagick vulkan-validationlayers spirv-tools llvm-14 g++ cmake)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt

export CARGO_TERM_COLOR=never
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"; chmod 0700 "$XDG_RUNTIME_DIR"
export DISPATCHSCOPE_REQUIRE_VULKAN=1

echo "== format"
cargo fmt --all --check

echo "== layering: which crate may depend on which (ARCHITECTURE.md)"
# deps CRATE PATTERN WHY: fails when CRATE depends (normal or build edges, any depth) on a crate
# whose name matches PATTERN.
deps() {
    local found
    found=$(cargo tree -p "$1" -e normal,build --prefix none --locked | sed 's/ .*//' | sort -u | grep -E "^($2)$" || true)
    if [ -n "$found" ]; then
        echo "layering violated: $1 depends on $(echo $found) ($3)"; exit 1
    fi
}
# users CRATE PATTERN WHY: fails when a crate whose name does not match PATTERN depends on CRATE
# directly (a normal or build edge; dev edges, which only tests take, are not counted).
users() {
    local found
    found=$(cargo tree -i "$1" -e normal,build --depth 1 --prefix none --locked | sed 1d | sed 's/ .*//' | sort -u | grep -vE "^($2)$" || true)
    if [ -n "$found" ]; then
        echo "layering violated: $(echo $found) depends on $1 ($3)"; exit 1
    fi
}
ui='egui|eframe|winit|egui_[a-z_]+|wgpu|glow|rfd'
deps dispatchscope-core "$ui|ash|rspirv|spirv-tools|dispatchscope-(analysis|formats|live|vk|demo|views)" \
    "the engine draws nothing, opens no file or socket and calls no Vulkan; the analysis is above it"
deps dispatchscope-analysis "$ui|ash|rspirv|spirv-tools|dispatchscope-(formats|live|vk|demo|rdna|views|capi)" \
    "the analysis reads reports: it draws nothing, opens no file or socket and calls no Vulkan"
users dispatchscope-analysis "dispatchscope|dispatchscope-(formats|views)" \
    "the analysis is the debugger's: sessions on disk (formats), panels (views) and the app use it"
deps dispatchscope-formats "$ui|ash|dispatchscope-(live|vk|demo|views)" "files only"
deps dispatchscope-live "$ui|ash|dispatchscope-(vk|demo|views)" "the live protocol draws nothing"
deps dispatchscope-vk "$ui|dispatchscope-(live|demo|views)" "the backend draws nothing"
deps dispatchscope-demo "$ui|ash|dispatchscope-(vk|views)" "the demo target is a game, not a debugger"
deps dispatchscope-rdna "$ui|ash|dispatchscope-(core|formats|live|vk|demo|views|capi)" \
    "the decoder knows machine code, not the engine"
deps dispatchscope-capi "$ui|spirv-tools|spirv-tools-sys|dispatchscope-(demo|views)" \
    "the C ABI is what an emulator embeds: no engine call runs a process (SPIRV-Tools' executables)"
deps dispatchscope-views "ash|rfd|dispatchscope-(formats|live|vk|demo)" \
    "views draw reports: no file, socket or device"
# What an emulator links is the dispatch path alone: the C ABI builds the Vulkan crate without its
# demo (the traversal pass, verify, the benches), which only the app turns on, and without `tools`
# (SPIRV-Tools' executables, run as processes: the debugger's tools and the tests).
if cargo tree -p dispatchscope-capi -e normal,build -f '{p} {f}' --prefix none --locked | grep -E '^dispatchscope-vk .* .*\b(demo|bench|tools)\b'; then
    echo "layering violated: dispatchscope-capi builds dispatchscope-vk with its demo or its tools"; exit 1
fi

echo "== clippy"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

echo "== tests"
cargo test --workspace --all-features --locked

if [ -x .ci/window-test.sh ]; then
    echo "== the real binary in a real window"
    bash .ci/window-test.sh
fi
echo "all checks passed"
