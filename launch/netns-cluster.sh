#!/usr/bin/env bash
# A simulated cluster on one machine: N "hosts" = network namespaces joined by a bridge, each with
# its own address in a private test subnet and a token-bucket-shaped link.
#
#   netns-cluster.sh [--id K] up N [--rate 1gbit] [--burst 4kb] [--delay 0.1ms]
#                                                                    create hosts 0 … N-1
#   netns-cluster.sh [--id K] run HOST CMD [ARGS…]                   run CMD inside host HOST
#   netns-cluster.sh [--id K] addr HOST                              print host HOST's address
#   netns-cluster.sh [--id K] kill HOST                              SIGKILL every process of HOST
#   netns-cluster.sh [--id K] link HOST up|down                      cut / restore HOST's cable
#   netns-cluster.sh [--id K] status                                 hosts, addresses, qdiscs
#   netns-cluster.sh [--id K] down                                   remove everything of cluster K
#   netns-cluster.sh [--id K] with N [--rate R] [--delay D] -- CMD…  up, run CMD (in the root
#                                                                     namespace), down on any exit
#
# Layout of cluster K (0-199, default $CUMULUS_NETNS_ID or 0; lets test processes run side by side):
#   namespace cmh<K>sw   the switch: bridge cmbr0 and one port cmp<i> per host
#   namespace cmh<K>n<i> host i: eth0 = 10.231.K.(i+1)/24, lo up
# Shaping: tbf at RATE on host i's eth0 egress (host → switch) and on port cmp<i> egress (switch →
# host), so each host's link is RATE in both directions, like a full-duplex NIC. The bucket (--burst,
# default 4kb: 33 us at 1 Gbit/s, about 3 frames) is what passes at veth speed after an idle spell; a larger one
# hides the wire time of small messages (256kb lets a 64 KiB message through untimed). tbf splits
# GSO super-packets larger than the bucket, so 4kb still reaches ~0.91-0.95 Gbit/s of TCP payload. Offloads (TSO/GSO)
# are turned off where ethtool exists so tbf sees wire-sized packets.
# --delay: netem under the tbf on each host's egress, so a packet is held once on its way and a
# round trip takes twice the delay. A kernel without netem gets the same from a delay line in user
# space (cumulus-link-delay, from the build; CUMULUS_LINK_DELAY names another copy): each host's
# packets for the subnet are routed into a tun device "cmdly", held there, and sent on through eth0
# and its tbf. The line runs in the switch namespace, so `kill HOST` leaves it alone.
#
# Only names with the cmh<K> prefix are created or removed, and only inside those namespaces (the
# bridge lives in the switch namespace, so the root namespace gains no interface). `up` removes what
# it built if it fails or is interrupted; `with` also removes everything on exit, SIGINT and SIGTERM.
# Needs root (CAP_NET_ADMIN) and iproute2. Exit codes: 0 ok, 1 failure, 2 usage, 3 not available.
set -euo pipefail

usage() { sed -n "2,16p" "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "netns-cluster: $*" >&2; exit 1; }

ID="${CUMULUS_NETNS_ID:-0}"
if [[ "${1:-}" == "--id" ]]; then ID="${2:?--id needs a number}"; shift 2; fi
[[ "$ID" =~ ^[0-9]+$ ]] && ((ID <= 199)) || die "--id $ID: give a number 0-199"
PREFIX="cmh${ID}"
SWITCH="${PREFIX}sw"
SUBNET="10.231.${ID}"

host_ns() { echo "${PREFIX}n$1"; }
host_addr() { echo "${SUBNET}.$(($1 + 1))"; }

# Prints the hosts of this cluster, one index per line, in order.
hosts() {
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^${PREFIX}n\([0-9]\+\)$/\1/p" | sort -n
}

check_available() {
  if [[ $(id -u) -ne 0 ]]; then echo "netns-cluster: needs root (CAP_NET_ADMIN)" >&2; exit 3; fi
  command -v ip >/dev/null || { echo "netns-cluster: iproute2 'ip' not found" >&2; exit 3; }
  command -v tc >/dev/null || { echo "netns-cluster: iproute2 'tc' not found" >&2; exit 3; }
}

kill_host() {  # SIGKILL every process whose network namespace is host $1's
  local ns pids
  ns=$(host_ns "$1")
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null || true
}

down() {
  local i
  for i in $(hosts); do kill_host "$i"; done
  for i in $(hosts); do ip netns delete "$(host_ns "$i")" 2>/dev/null || true; done
  if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$SWITCH"; then
    local pids
    pids=$(ip netns pids "$SWITCH" 2>/dev/null || true)
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null || true
    ip netns delete "$SWITCH" 2>/dev/null || true
  fi
}

# tbf: the bucket must hold at least one (possibly GSO-sized) packet, and enough for the rate at a
# 1 ms timer; the queue limit bounds the latency a full queue adds.
shape() {  # shape NS DEV RATE BURST
  local ns=$1 dev=$2 rate=$3 burst=$4
  if command -v ethtool >/dev/null; then
    ip netns exec "$ns" ethtool -K "$dev" tso off gso off gro off >/dev/null 2>&1 || true
  fi
  ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 20ms
}

is_zero() { [[ "$1" =~ ^0*(\.0*)?(us|ms|s)?$ ]]; }  # "0ms", "0", "0.0us": no delay at all

add_netem() {  # add_netem NS DEV DELAY — under the tbf; fails where the kernel has no netem
  ip netns exec "$1" tc qdisc add dev "$2" parent 1:1 handle 10: netem delay "$3" 2>/dev/null
}

DELAY_DEVICE=cmdly
DELAY_MARK=45

delay_line_binary() {
  local candidate
  for candidate in "${CUMULUS_LINK_DELAY:-}" "$(dirname "$0")/../build/bin/cumulus-link-delay" \
      "$(command -v cumulus-link-delay || true)"; do
    if [[ -n "$candidate" && -x "$candidate" ]]; then echo "$candidate"; return 0; fi
  done
  return 1
}

# The delay line for hosts "$@" (indices): each host's packets for the subnet go into its tun
# (every packet but the line's own, which carry DELAY_MARK), and one process holds them.
start_delay_line() {
  local delay=$1 binary i ns namespaces=()
  shift
  if ! binary=$(delay_line_binary); then
    echo "netns-cluster: warning: --delay $delay ignored: the kernel has no netem qdisc and" \
         "cumulus-link-delay is not built (cmake --build build --target cumulus-link-delay," \
         "or set CUMULUS_LINK_DELAY)" >&2
    return 0
  fi
  if ! ip netns exec "$(host_ns "$1")" ip tuntap add dev "$DELAY_DEVICE" mode tun 2>/dev/null; then
    echo "netns-cluster: warning: --delay $delay ignored: the kernel has no netem qdisc and no" \
         "tun devices (/dev/net/tun) for the delay line" >&2
    return 0
  fi
  for i in "$@"; do
    ns=$(host_ns "$i")
    ((i == $1)) || ip netns exec "$ns" ip tuntap add dev "$DELAY_DEVICE" mode tun
    ip netns exec "$ns" ip link set "$DELAY_DEVICE" up
    ip netns exec "$ns" ip route add "${SUBNET}.0/24" dev "$DELAY_DEVICE" src "$(host_addr "$i")" \
      table "$DELAY_MARK"
    ip netns exec "$ns" ip rule add pref 100 not fwmark "$DELAY_MARK" lookup "$DELAY_MARK"
    # Replies arrive on eth0 while the route back points at the tun: no reverse-path check.
    ip netns exec "$ns" sh -c 'for f in all eth0; do
      echo 0 > /proc/sys/net/ipv4/conf/$f/rp_filter; done'
    namespaces+=("$ns")
  done
  ip netns exec "$SWITCH" "$binary" --delay "$delay" --device "$DELAY_DEVICE" \
    --mark "$DELAY_MARK" "${namespaces[@]}"
  echo "netns-cluster: no netem qdisc in this kernel: the delay line $binary holds each" \
       "host's packets $delay" >&2
}

up() {
  local n="" rate="" delay="" burst=4kb
  while (($#)); do
    case "$1" in
      --rate) rate="${2:?--rate needs a value like 1gbit}"; shift 2 ;;
      --burst) burst="${2:?--burst needs a size like 32kb}"; shift 2 ;;
      --delay) delay="${2:?--delay needs a value like 0.1ms}"; shift 2 ;;
      --*) die "up: unknown flag $1" ;;
      *) [[ -z "$n" ]] || die "up: one host count, got '$n' and '$1'"; n="$1"; shift ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "up: give a host count 1-200, got '${n}'"
  check_available
  [[ -z "$(hosts)" ]] || die "cluster $ID already exists ($(hosts | wc -l) hosts); run 'down' first"
  trap 'down; trap - EXIT; exit 1' INT TERM
  trap 'rc=$?; if ((rc != 0)); then echo "netns-cluster: up failed, removing cluster $ID" >&2; down; fi' EXIT
  if ! ip netns add "$SWITCH" 2>/dev/null; then
    trap - EXIT INT TERM
    echo "netns-cluster: cannot create network namespaces here (ip netns add failed)" >&2
    exit 3
  fi
  ip netns exec "$SWITCH" ip link set lo up
  ip netns exec "$SWITCH" ip link add cmbr0 type bridge
  ip netns exec "$SWITCH" ip link set cmbr0 up
  local i ns port delay_hosts=()
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    port="cmp$i"
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    # Create the pair inside the host namespace, then move one end to the switch.
    ip netns exec "$ns" ip link add eth0 type veth peer name "$port"
    ip netns exec "$ns" ip link set "$port" netns "$SWITCH"
    ip netns exec "$ns" ip addr add "$(host_addr "$i")/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$SWITCH" ip link set "$port" master cmbr0
    ip netns exec "$SWITCH" ip link set "$port" up
    if [[ -n "$rate" ]]; then
      shape "$ns" eth0 "$rate" "$burst"
      shape "$SWITCH" "$port" "$rate" "$burst"
    fi
    if [[ -n "$delay" ]] && ! is_zero "$delay"; then
      [[ -n "$rate" ]] || die "up: --delay needs --rate (netem sits under the tbf)"
      add_netem "$ns" eth0 "$delay" || delay_hosts+=("$i")
    fi
  done
  ((${#delay_hosts[@]} == 0)) || start_delay_line "$delay" "${delay_hosts[@]}"
  trap - EXIT INT TERM
  echo "netns-cluster: cluster $ID up: $n host(s) ${SUBNET}.1-${SUBNET}.$n${rate:+, $rate links}"
}

status() {
  local i
  [[ -n "$(hosts)" ]] || { echo "cluster $ID: down"; return 0; }
  for i in $(hosts); do
    printf 'host %s  ns %s  addr %s  qdisc %s%s\n' "$i" "$(host_ns "$i")" "$(host_addr "$i")" \
      "$(ip netns exec "$(host_ns "$i")" tc qdisc show dev eth0 | head -1)" \
      "$(ip netns exec "$(host_ns "$i")" ip link show "$DELAY_DEVICE" >/dev/null 2>&1 &&
         echo "  delay line $DELAY_DEVICE")"
  done
}

require_host() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] || die "give a host index, got '${1:-}'"
  hosts | grep -qx "$1" || die "cluster $ID has no host $1 (hosts: $(hosts | tr '\n' ' '))"
}

cmd="${1:-}"
[[ -n "$cmd" ]] || usage
shift
case "$cmd" in
  up) up "$@" ;;
  down) check_available; down ;;
  status) status ;;
  addr) require_host "${1:-}"; host_addr "$1" ;;
  run)
    require_host "${1:-}"
    ns=$(host_ns "$1"); shift
    (($#)) || die "run: give a command"
    exec ip netns exec "$ns" "$@"
    ;;
  kill) require_host "${1:-}"; kill_host "$1" ;;
  link)
    require_host "${1:-}"
    [[ "${2:-}" == up || "${2:-}" == down ]] || die "link: give 'up' or 'down'"
    ip netns exec "$SWITCH" ip link set "cmp$1" "$2"
    ;;
  with)
    args=()
    while (($#)) && [[ "$1" != "--" ]]; do args+=("$1"); shift; done
    [[ "${1:-}" == "--" ]] && (($# > 1)) || die "with: give N [flags] -- CMD"
    shift
    "$0" --id "$ID" up "${args[@]}"
    trap '"$0" --id "$ID" down' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    CUMULUS_NETNS_ID="$ID" "$@"
    ;;
  -h | --help | help) usage ;;
  *) echo "netns-cluster: unknown command '$cmd'" >&2; usage ;;
esac
