#!/usr/bin/env bash
# Starts the real binary in a real window under Xvfb on a shipped sample, takes a screenshot, and
# checks that the window drew content (not a blank frame). Optional argument: where to keep the PNG.
set -euo pipefail
cd "$(dirname "$0")/.."
shot="${1:-$(mktemp -d)/dispatchscope-window.png}"
bin="${CARGO_TARGET_DIR:-target}/debug/dispatchscope"
[ -x "$bin" ] || cargo build -q -p dispatchscope --locked

display=":$(( 90 + RANDOM % 100 ))"
Xvfb "$display" -screen 0 1600x1000x24 -nolisten tcp >/dev/null 2>&1 &
xvfb=$!
app=""
cleanup() { [ -n "$app" ] && kill "$app" 2>/dev/null; kill "$xvfb" 2>/dev/null || true; }
trap cleanup EXIT
export DISPLAY="$display"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 0700 "$XDG_RUNTIME_DIR"
config="$(mktemp -d)"   # a fresh settings folder: the test never sees a person's layout
for _ in $(seq 50); do xdpyinfo >/dev/null 2>&1 && break; sleep 0.1; done 2>/dev/null || sleep 1

HOME="$config" XDG_CONFIG_HOME="$config" XDG_DATA_HOME="$config" \
    "$bin" samples/ray-traversal.json >"$config/app.log" 2>&1 &
app=$!

# Wait (up to 60 s) until the screen shows many colours: text, tables and the address line.
colours=0
for _ in $(seq 120); do
    sleep 0.5
    if ! kill -0 "$app" 2>/dev/null; then
        echo "the app exited early:"; cat "$config/app.log"; exit 1
    fi
    import -window root "$shot" 2>/dev/null || continue
    colours=$(convert "$shot" -format '%k' info: 2>/dev/null || echo 0)
    [ "$colours" -gt 64 ] && break
done
echo "window test: $colours distinct colours in $shot"
if [ "$colours" -le 64 ]; then
    echo "the window drew nothing (a blank or near-blank frame)"; cat "$config/app.log"; exit 1
fi
