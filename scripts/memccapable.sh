#!/usr/bin/env bash
# Run libmemcached's memccapable protocol checker against a fresh server.
#
#   scripts/memccapable.sh                       # strata (target/release/strata)
#   SERVER_BIN=/usr/bin/memcached scripts/memccapable.sh
#   WIRE_TARGET=memcached scripts/memccapable.sh # same, like the Python suites
#
# ASCII checks always run (-a). The binary-protocol checks (-b) run when the
# server answers a binary VERSION request; MEMCCAPABLE_BINARY=yes requires
# them (fail if unsupported), MEMCCAPABLE_BINARY=no skips them.
# Exits non-zero if any check fails; stops the server by PID.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${WIRE_TARGET:-strata}"
if [[ -z "${SERVER_BIN:-}" ]]; then
    if [[ "$TARGET" == memcached ]]; then
        SERVER_BIN="$(command -v memcached || echo /usr/bin/memcached)"
    else
        SERVER_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
    fi
fi
MEMCCAPABLE="${MEMCCAPABLE:-$(command -v memccapable || echo /usr/bin/memccapable)}"
BINARY_MODE="${MEMCCAPABLE_BINARY:-auto}"
PY="${PYTHON:-python3}"

[[ -x "$SERVER_BIN" ]] || { echo "memccapable.sh: server binary $SERVER_BIN not found" >&2; exit 2; }
[[ -x "$MEMCCAPABLE" ]] || { echo "memccapable.sh: memccapable not found (apt-get install libmemcached-tools)" >&2; exit 2; }

PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
ARGS=(-l 127.0.0.1 -p "$PORT")
if [[ "$(basename "$SERVER_BIN")" == memcached* ]]; then
    ARGS+=(-U 0)
    [[ "$(id -u)" == 0 ]] && ARGS+=(-u root)
fi

LOG="$(mktemp)"
"$SERVER_BIN" "${ARGS[@]}" >"$LOG" 2>&1 &
SERVER_PID=$!
cleanup() {
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
    rm -f "$LOG"
}
trap cleanup EXIT

# wait until it listens
"$PY" - "$PORT" "$SERVER_PID" <<'EOF' || { echo "memccapable.sh: server did not start:"; cat "$LOG"; exit 2; }
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(1)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.02)
sys.exit(1)
EOF

# Does the server speak the binary protocol? (binary VERSION request, opcode 0x0b)
binary_supported() {
    "$PY" - "$PORT" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
s.sendall(bytes([0x80, 0x0B]) + bytes(22))
try:
    reply = s.recv(24)
except OSError:
    reply = b""
sys.exit(0 if reply[:2] == bytes([0x81, 0x0B]) else 1)
EOF
}

MODES=(-a)
case "$BINARY_MODE" in
    yes) MODES+=(-b) ;;
    no) ;;
    auto)
        if binary_supported; then MODES+=(-b)
        else echo "memccapable.sh: server does not answer the binary protocol: ASCII checks only"; fi ;;
    *) echo "memccapable.sh: MEMCCAPABLE_BINARY must be auto, yes or no" >&2; exit 2 ;;
esac

echo "memccapable.sh: $SERVER_BIN on 127.0.0.1:$PORT (pid $SERVER_PID)"
passed=0; failed=0; rc=0
for mode in "${MODES[@]}"; do
    out="$(mktemp)"
    set +e
    timeout 120 stdbuf -oL -eL "$MEMCCAPABLE" "$mode" -t 5 -h 127.0.0.1 -p "$PORT" >"$out" 2>&1
    r=$?
    set -e
    cat "$out"
    p=$(grep -c '\[pass\]' "$out" || true)
    f=$(grep -c '\[FAIL\]' "$out" || true)
    passed=$((passed + p)); failed=$((failed + f))
    rm -f "$out"
    if [[ $r -ne 0 ]]; then
        rc=1
        [[ $r -eq 124 ]] && echo "memccapable.sh: memccapable $mode timed out"
    fi
    if [[ $p -eq 0 ]]; then rc=1; fi
done

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "memccapable.sh: the server died during the checks"; cat "$LOG"; rc=1
fi
echo "memccapable: $passed passed, $failed failed"
exit $rc
