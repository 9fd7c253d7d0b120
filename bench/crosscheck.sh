#!/usr/bin/env bash
# Cross-checks strata-bench against independent load generators on one
# workload: 100% sets of 1000-byte values, 16-byte keys over 100,000 keys,
# 16 connections, 2 client threads, -m 1024 -t 2 servers.
#
#   memcaslap (libmemcached-tools)  vs strata-bench, against memcached and strata
#   redis-benchmark (redis-tools)   vs strata-bench, against redis-server
#
# Each tool drives a server this script started; the server's CPU time is read
# from /proc/PID/stat around each tool's run, so CPU per op does not depend on
# what the tool reports; the tool's own CPU time is measured the same way
# (getrusage of the child). Closed loop: each tool goes as fast as it can.
# (memcaslap's -P rate limit did not hold the rate here, so there is no
# open-loop pair.) Prints a Markdown table.
#
#   bench/crosscheck.sh            # 10 s per tool
#   SECS=30 bench/crosscheck.sh
set -euo pipefail

cd "$(dirname "$0")/.."
SECS=${SECS:-10}
CONNS=16
BENCH=target/release/strata-bench
STRATA=target/release/strata
TICK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in memcaslap redis-benchmark memcached redis-server; do
    command -v "$tool" >/dev/null || { echo "crosscheck: $tool not installed (apt-get install libmemcached-tools redis-tools memcached redis-server)" >&2; exit 1; }
done
[ -x "$BENCH" ] && [ -x "$STRATA" ] || { echo "crosscheck: run cargo build --release first" >&2; exit 1; }

# utime+stime of a process, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "crosscheck: nothing listening on $1" >&2
    exit 1
}

start() { # name port -> PID in $SPID
    case $1 in
        strata) "$STRATA" -l 127.0.0.1 -p "$2" -m 1024 -t 2 2>/dev/null & ;;
        memcached) memcached -l 127.0.0.1 -p "$2" -U 0 -m 1024 -t 2 -u root & ;;
        redis) redis-server --port "$2" --bind 127.0.0.1 --save '' --appendonly no \
            --maxmemory 1gb --maxmemory-policy allkeys-lru >/dev/null & ;;
    esac
    SPID=$!
    PIDS+=("$SPID")
    wait_port "$2"
}

# memaslap: keys of exactly 16 bytes (its minimum), 1000-byte values, sets only.
cat >"$WORK/set.cfg" <<'EOF'
key
16 16 1
value
1000 1000 1
cmd
0 1
1 0
EOF

ROWS=()
row() { # tool server ops seconds server-ticks client-cpu-seconds
    local ops=$3 secs=$4 cpu_us client_us
    cpu_us=$(awk -v t="$5" -v k="$TICK" -v o="$ops" 'BEGIN{printf "%.2f", t / k * 1e6 / o}')
    client_us=$(awk -v c="$6" -v o="$ops" 'BEGIN{printf "%.2f", c * 1e6 / o}')
    ROWS+=("| $1 | $2 | $(awk -v o="$ops" -v s="$secs" 'BEGIN{printf "%d", o / s}') | $cpu_us | $client_us |")
}

# Runs a command, its output to $WORK/out, its CPU seconds (user+sys) to $WORK/cpu.
timed() {
    python3 - "$@" >"$WORK/out" 2>&1 <<'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=sys.stdout, stderr=sys.stdout, check=False)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"CPU {r.ru_utime + r.ru_stime:.3f}")
PY
    sed -n 's/^CPU //p' "$WORK/out" >"$WORK/cpu"
}

run_memcaslap() { # server port pid
    local t0 out ops secs
    t0=$(ticks "$3")
    timed memcaslap -s "127.0.0.1:$2" -T 2 -c "$CONNS" -t "${SECS}s" -F "$WORK/set.cfg"
    out=$(cat "$WORK/out")
    # Final summary: "Run time: 10.0s Ops: 700000 TPS: 70000 Net_rate: ..."
    ops=$(sed -n 's/.*Run time: *\([0-9.]*\)s Ops: *\([0-9]*\) TPS.*/\2/p' <<<"$out" | tail -1)
    secs=$(sed -n 's/.*Run time: *\([0-9.]*\)s Ops: *\([0-9]*\) TPS.*/\1/p' <<<"$out" | tail -1)
    [ -n "$ops" ] || { echo "crosscheck: no summary from memcaslap:" >&2; echo "$out" >&2; exit 1; }
    row memcaslap "$1" "$ops" "$secs" $(($(ticks "$3") - t0)) "$(cat "$WORK/cpu")"
}

run_redis_benchmark() { # port pid
    local t0 out ops secs n=$((SECS * 40000))
    t0=$(ticks "$2")
    local start_ns end_ns
    start_ns=$(date +%s%N)
    timed redis-benchmark -p "$1" -t set -n "$n" -c "$CONNS" --threads 2 -d 1000 -r 100000 -q
    out=$(cat "$WORK/out")
    end_ns=$(date +%s%N)
    ops=$n
    secs=$(awk -v a="$start_ns" -v b="$end_ns" 'BEGIN{printf "%.3f", (b - a) / 1e9}')
    grep -q "SET" <<<"$out" || { echo "crosscheck: redis-benchmark failed: $out" >&2; exit 1; }
    row redis-benchmark redis "$ops" "$secs" $(($(ticks "$2") - t0)) "$(cat "$WORK/cpu")"
}

run_bench() { # server port pid protocol
    local t0 ops secs
    t0=$(ticks "$3")
    timed "$BENCH" run -q --addr "127.0.0.1:$2" --pid "$3" --protocol "$4" --ratio 1:0 \
        -c "$CONNS" -t 2 --key-size 16 --value-size 1000 --keys 100000 \
        --duration "$SECS" --out "$WORK/b"
    read -r ops secs < <(python3 -c "
import json; r = json.load(open('$WORK/b/run.json'))['runs'][0]
print(r['requests'], r['elapsed_secs'])")
    row strata-bench "$1" "$ops" "$secs" $(($(ticks "$3") - t0)) "$(cat "$WORK/cpu")"
}

for server in memcached strata; do
    start "$server" 22111
    run_memcaslap "$server" 22111 "$SPID"
    run_bench "$server" 22111 "$SPID" text
    kill "$SPID"
    wait "$SPID" 2>/dev/null || true
done
start redis 22112
run_redis_benchmark 22112 "$SPID"
run_bench redis 22112 "$SPID" resp

echo "| tool | server | sets/s | server CPU µs/op | tool CPU µs/op |"
echo "|---|---|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
