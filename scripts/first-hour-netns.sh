#!/usr/bin/env bash
# Issue 30's two-host check, on one machine: two engines in two network
# namespaces joined by a veth pair, over each metastore (embedded, Redis,
# etcd), with a real Prometheus scraping the receiving engine.
#
# For each metastore it checks that
#   - `ferry bench --target` from B writes verified bytes into A;
#   - A, the receiver, shows them: `ferry status`, `ferry top` (by name,
#     through the metastore) and a PromQL query of Prometheus;
#   - `ferry doctor --peer` from B exits 0, and exits 1 naming B's rail
#     once B's veth is down.
#
# Needs root, ip(8), redis-server, etcd and prometheus (.ci/run installs
# them) and bin/ from `make build`. Usage: scripts/first-hour-netns.sh
# [embedded|redis|etcd ...] (default: all three). Exit 0 when every check
# passed; each check prints one line.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(embedded redis etcd)

tag=$$
A=fh-a-$tag B=fh-b-$tag VA=fha$tag VB=fhb$tag
IPA=10.99.$((tag % 200)).1 IPB=10.99.$((tag % 200)).2
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	ip netns del "$A" 2>/dev/null || true
	ip netns del "$B" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$A"
ip netns add "$B"
ip -n "$A" link set lo up
ip -n "$B" link set lo up
ip link add "$VA" netns "$A" type veth peer name "$VB" netns "$B"
ip -n "$A" addr add "$IPA/24" dev "$VA"
ip -n "$B" addr add "$IPB/24" dev "$VB"
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/secret"
chmod 600 "$work/secret"
fails=0
ok() { printf 'PASS  %s\n' "$*"; }
bad() { printf 'FAIL  %s\n' "$*"; fails=$((fails + 1)); }
inA() { ip netns exec "$A" "$@"; }
inB() { ip netns exec "$B" "$@"; }

# wait_for CMD... : retries CMD for up to 20 s (a server that starts).
wait_for() {
	for _ in $(seq 200); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

for kind in "${kinds[@]}"; do
	d=$work/$kind
	mkdir -p "$d"
	case $kind in
	embedded)
		ma="metastore {\n  kind   = \"embedded\"\n  listen = \"$IPA:7070\"\n}"
		mb="metastore {\n  kind = \"http\"\n  url  = \"http://$IPA:7070/metadata\"\n}"
		;;
	redis)
		ip netns exec "$A" redis-server --bind "$IPA" --port 6390 --protected-mode no --save '' --appendonly no --dir "$d" >"$d/redis.log" 2>&1 &
		pids+=($!)
		wait_for inA redis-cli -h "$IPA" -p 6390 ping
		ma="metastore {\n  kind    = \"redis\"\n  address = \"$IPA:6390\"\n}"
		mb=$ma
		;;
	etcd)
		ip netns exec "$A" etcd --data-dir "$d/etcd" --listen-client-urls "http://$IPA:2390" --advertise-client-urls "http://$IPA:2390" \
			--listen-peer-urls "http://$IPA:2391" --initial-advertise-peer-urls "http://$IPA:2391" \
			--initial-cluster "default=http://$IPA:2391" >"$d/etcd.log" 2>&1 &
		pids+=($!)
		wait_for inA curl -sf "http://$IPA:2390/health"
		ma="metastore {\n  kind      = \"etcd\"\n  endpoints = [\"http://$IPA:2390\"]\n}"
		mb=$ma
		;;
	*)
		echo "unknown metastore kind $kind (want embedded, redis or etcd)" >&2
		exit 2
		;;
	esac
	name=fh-a-$kind
	printf 'name = "%s"\nplugin_dir = "%s"\ncluster_secret_file = "%s"\n%b\nmetrics {\n  listen = "%s:9464"\n}\nplugin "tcp" {\n  config {\n    listen = ["%s:0"]\n  }\n}\nplugin "shm" {}\n' \
		"$name" "$BIN" "$work/secret" "$ma" "$IPA" "$IPA" >"$d/a.hcl"
	printf 'name = "fh-b-%s"\nplugin_dir = "%s"\ncluster_secret_file = "%s"\n%b\nplugin "tcp" {\n  config {\n    listen = ["%s:0"]\n  }\n}\nplugin "shm" {}\n' \
		"$kind" "$BIN" "$work/secret" "$mb" "$IPB" >"$d/b.hcl"

	# A: the receiver, with a buffer peers may write.
	ip netns exec "$A" "$BIN/ferry" run --config "$d/a.hcl" --expose 64MiB --log-level warn >"$d/a.out" 2>"$d/a.err" &
	pids+=($!)
	if ! wait_for grep -q '"control"' "$d/a.out"; then
		bad "$kind: engine A did not start: $(tail -3 "$d/a.err")"
		continue
	fi
	ctl=$(grep -o '"control":"[^"]*"' "$d/a.out" | head -1 | cut -d'"' -f4)

	# Prometheus in A's namespace, scraping A every second.
	printf 'global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ferry\n    static_configs:\n      - targets: ["%s:9464"]\n' "$IPA" >"$d/prom.yml"
	ip netns exec "$A" prometheus --config.file="$d/prom.yml" --storage.tsdb.path="$d/prom" --web.listen-address="$IPA:9090" >"$d/prom.log" 2>&1 &
	pids+=($!)
	wait_for inA curl -sf "http://$IPA:9090/-/ready" || bad "$kind: prometheus did not start"

	# B: bench against A by name, through the metastore.
	if inB "$BIN/ferry" bench --config "$d/b.hcl" --target "$name" --transport tcp --op write --size 1MiB --duration 3s --json \
		>"$d/bench.json" 2>"$d/bench.err" && grep -q '"verified":true' "$d/bench.json"; then
		moved=$(grep -o '"bytes":[0-9]*' "$d/bench.json" | head -1 | cut -d: -f2)
		ok "$kind: bench --target $name from B: $moved bytes written, verified"
	else
		bad "$kind: bench --target from B: $(tail -3 "$d/bench.err")"
		moved=0
	fi

	# A's status and top (by name, through the metastore) show what it served.
	served=$(inA "$BIN/ferry" status --engine "$ctl" --config "$d/a.hcl" --json | /usr/bin/python3 -c '
import json, sys
st = json.load(sys.stdin)
print(sum(s.get("bytes", 0) for p in st.get("plugins", []) for s in (p.get("served") or []) if s.get("op") == "write"))')
	if [ "$served" -ge "$moved" ] && [ "$moved" -gt 0 ]; then
		ok "$kind: ferry status of A shows $served bytes served (written into it)"
	else
		bad "$kind: ferry status of A shows $served bytes served, bench moved $moved"
	fi
	if inB "$BIN/ferry" top --engine "$name" --config "$d/b.hcl" --count 1 >"$d/top.txt" 2>&1 && grep -qi "served" "$d/top.txt"; then
		ok "$kind: ferry top --engine $name (by name, from B) lists the served traffic"
	else
		bad "$kind: ferry top by name: $(tail -3 "$d/top.txt")"
	fi
	q='sum(ferry_rail_served_bytes_total{op="write"})'
	got=0
	for _ in $(seq 100); do
		got=$(inA curl -sf "http://$IPA:9090/api/v1/query" --data-urlencode "query=$q" | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(int(float(r[0]["value"][1])) if r else 0)')
		[ "$got" -ge "$moved" ] && break
		sleep 0.2
	done
	if [ "$got" -ge "$moved" ] && [ "$moved" -gt 0 ]; then
		ok "$kind: PromQL $q on A = $got"
	else
		bad "$kind: PromQL $q on A = $got, bench moved $moved"
	fi

	# doctor --peer from B: 0 with the link up, 1 naming B's rail with it down.
	if inB "$BIN/ferry" doctor --config "$d/b.hcl" --peer "$name" >"$d/doctor-up.txt" 2>&1; then
		ok "$kind: doctor --peer $name from B exits 0 ($(grep -ci 'not tried\|skip' "$d/doctor-up.txt") transports skipped, with the reason)"
	else
		bad "$kind: doctor --peer with the link up: $(tail -5 "$d/doctor-up.txt")"
	fi
	ip -n "$B" link set "$VB" down
	if inB "$BIN/ferry" doctor --config "$d/b.hcl" --peer "$name" >"$d/doctor-down.txt" 2>&1; then
		bad "$kind: doctor --peer exited 0 with B's veth down"
	elif grep -q "$IPB" "$d/doctor-down.txt"; then
		ok "$kind: doctor --peer exits 1 with B's veth down, naming rail $IPB"
	else
		bad "$kind: doctor --peer exited 1 but does not name $IPB: $(tail -5 "$d/doctor-down.txt")"
	fi
	ip -n "$B" link set "$VB" up
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
done
if [ "$fails" -gt 0 ]; then
	echo "first-hour-netns: $fails checks failed (rerun one metastore kind with bash -x to see its files)"
	exit 1
fi
echo "first-hour-netns: every check passed"
