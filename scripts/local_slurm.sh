#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost, for tests and for rehearsing cluster runs.
#
#   scripts/local_slurm.sh start    install (Debian packages, once), configure, start, wait for idle
#   ... start --clean                also cancel jobs left queued by an earlier run (for CI)
#   scripts/local_slurm.sh stop     cancel jobs, stop every daemon this script started
#   scripts/local_slurm.sh status   sinfo of the running cluster
#
# Runs as root on Debian. Everything lives in a private state directory
# (STAMPEDE_SLURM_DIR, default /tmp/stampede-slurm): config, spool, logs, pid files, a private
# munged socket and a private MariaDB (its own datadir, socket, and a port on 127.0.0.1), so the
# system's munge and MariaDB are never touched. Daemons: munged, mariadbd, slurmdbd (so `sacct`
# works), slurmctld, slurmd (as node `localhost`). Clients find the config through
# /etc/slurm/slurm.conf (a link made here when that file does not exist) or SLURM_CONF.
#
# The node advertises the machine's real CPUs and a little less than its memory. Jobs do not
# share CPUs unless they ask (`--oversubscribe`; partitions say OverSubscribe=YES), so a job
# that fills the node really makes a `high` job preempt it. Two partitions on the one node:
# `debug` (default, PriorityTier=1, preemptable: requeued, with a GraceTime in which the job's
# --signal, e.g. submitit's USR2, arrives first) and `high` (PriorityTier=10, not preemptable).
set -euo pipefail

STATE_DIR="${STAMPEDE_SLURM_DIR:-/tmp/stampede-slurm}"
DB_PORT="${STAMPEDE_SLURM_DB_PORT:-3307}"
CLUSTER_NAME="stampede"
NODE="localhost"
# debug partition: seconds between the preemption signal (the job's --signal) and SIGTERM.
GRACE_S="${STAMPEDE_SLURM_GRACE_S:-10}"
DAEMONS="munged mariadb slurmdbd slurmctld slurmd"  # in start order

export PATH="/usr/sbin:/sbin:$PATH"
ETC="$STATE_DIR/etc"
RUN="$STATE_DIR/run"
LOG="$STATE_DIR/log"
MUNGE_SOCK="$RUN/munge.socket"
DB_SOCK="$RUN/mariadb.sock"
export SLURM_CONF="$ETC/slurm.conf"

say() { echo "local_slurm: $*"; }
die() { echo "local_slurm: error: $*" >&2; exit 1; }

# --- processes by pid file -------------------------------------------------------------------

pid_of() {  # pid_of NAME -> the live pid in run/NAME.pid, if that process is still NAME
    local f="$RUN/$1.pid" pid comm="$1"
    [[ "$1" == mariadb ]] && comm=mariadbd
    [[ -s "$f" ]] || return 1
    pid="$(tr -d '[:space:]' <"$f")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    # A stale pid file may name a pid that now belongs to someone else: check the command.
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]] && alive "$pid" || return 1
    echo "$pid"
}

alive() {  # alive PID: exists and is not a zombie (this init may be slow to reap orphans)
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"  # drop "pid (comm) ", leaving "STATE ppid ..."
    [[ "${stat%% *}" != Z ]]
}

is_up() { pid_of "$1" >/dev/null; }

wait_until() {  # wait_until SECONDS CMD... : poll CMD (quietly) every 0.2 s until it succeeds
    local limit="$1" t0=$SECONDS
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS - t0 < limit)) || return 1
        sleep 0.2
    done
}

show_log() { if [[ -f "$1" ]]; then tail -n 20 "$1" >&2; fi; }

# --- install -----------------------------------------------------------------------------------

missing_commands() {
    local c
    for c in munged mungekey mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd \
        sinfo sbatch sacct scontrol; do
        command -v "$c" >/dev/null 2>&1 || echo "$c"
    done
}

install_packages() {
    [[ -z "$(missing_commands)" ]] && return 0
    [[ -r /etc/debian_version ]] ||
        die "missing: $(missing_commands | xargs); not Debian, so install slurm, munge, mariadb yourself"
    local t0=$SECONDS log="/tmp/stampede-slurm-apt.log" made_policy=0
    say "installing slurm, munge, mariadb from Debian packages (log: $log) ..."
    # Package scripts would start the system's munge and MariaDB; policy-rc.d says no.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    local rc=0
    {
        apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                -o Dpkg::Use-Pty=0 slurmctld slurmd slurmdbd slurm-client munge mariadb-server
    } >"$log" 2>&1 || rc=$?
    ((made_policy)) && rm -f /usr/sbin/policy-rc.d
    if ((rc != 0)); then
        tail -n 30 "$log" >&2
        die "apt-get failed (exit $rc); full log in $log"
    fi
    [[ -z "$(missing_commands)" ]] || die "still missing after install: $(missing_commands | xargs)"
    say "packages installed in $((SECONDS - t0)) s"
}

# --- configuration -----------------------------------------------------------------------------

real_memory_mb() {  # a little under the machine's memory, so slurmd never finds "low memory"
    local total_kb
    total_kb="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
    echo $((total_kb * 95 / 100 / 1024))
}

write_slurm_conf() {
    local cpus mem
    cpus="$(nproc)"
    mem="$(real_memory_mb)"
    cat >"$ETC/slurm.conf.new" <<EOF
# Written by scripts/local_slurm.sh; rewritten on every start.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job may start again after this many seconds (default 120).
AuthInfo=socket=$MUNGE_SOCK,cred_expire=10
StateSaveLocation=$STATE_DIR/spool/ctld
SlurmdSpoolDir=$STATE_DIR/spool/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in containers and VMs without systemd: track processes through /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
InactiveLimit=0
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Preemption by partition priority: a job in 'high' requeues the 'debug' jobs in its way. The
# job's own --signal (submitit: USR2) is sent at preemption, GraceTime before SIGTERM.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
# For the slurmdbd connection, the "password" is the munge socket to use.
AccountingStoragePass=$MUNGE_SOCK
JobCompType=jobcomp/none

NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=$GRACE_S OverSubscribe=YES
PartitionName=high Nodes=$NODE MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF OverSubscribe=YES
EOF
    mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"
}

write_slurmdbd_conf() {
    cat >"$ETC/slurmdbd.conf" <<EOF
# Written by scripts/local_slurm.sh.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/db_password")
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$ETC/slurmdbd.conf"  # slurmdbd refuses a readable file that holds a password
}

link_etc_slurm_conf() {  # so plain `sinfo`/`sbatch` (and submitit) find us without SLURM_CONF
    local link=/etc/slurm/slurm.conf
    mkdir -p /etc/slurm
    if [[ ! -e "$link" && ! -L "$link" ]] ||
        [[ -L "$link" && "$(readlink "$link")" == */etc/slurm.conf ]]; then
        ln -sfn "$ETC/slurm.conf" "$link"
    elif [[ "$(readlink -f "$link")" != "$(readlink -f "$ETC/slurm.conf")" ]]; then
        say "note: $link belongs to another cluster; use: export SLURM_CONF=$ETC/slurm.conf"
    fi
}

prepare_dirs() {
    mkdir -p "$ETC" "$RUN" "$LOG" "$STATE_DIR/spool/ctld" "$STATE_DIR/spool/d" "$STATE_DIR/munge"
    chmod 755 "$STATE_DIR" "$ETC" "$RUN" "$LOG"
    chmod 700 "$STATE_DIR/munge"
    if [[ ! -s "$STATE_DIR/munge/munge.key" ]]; then
        mungekey --create --keyfile="$STATE_DIR/munge/munge.key" >/dev/null
    fi
    chmod 600 "$STATE_DIR/munge/munge.key"
    if [[ ! -s "$ETC/db_password" ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ETC/db_password")
    fi
    write_slurm_conf
    write_slurmdbd_conf
    link_etc_slurm_conf
}

# --- daemons -----------------------------------------------------------------------------------

start_munged() {
    is_up munged && return 0
    rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
    munged --socket="$MUNGE_SOCK" --key-file="$STATE_DIR/munge/munge.key" \
        --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" \
        --seed-file="$STATE_DIR/munge/munged.seed" --num-threads=4 ||
        { show_log "$LOG/munged.log"; die "munged did not start"; }
    wait_until 10 munge -n -S "$MUNGE_SOCK" ||
        { show_log "$LOG/munged.log"; die "munged does not answer on $MUNGE_SOCK"; }
}

db_sql() { mariadb --no-defaults --socket="$DB_SOCK" -u root "$@"; }

start_mariadb() {
    is_up mariadb && return 0
    local datadir="$STATE_DIR/mysql" fresh=0
    if [[ ! -d "$datadir/mysql" ]]; then
        rm -rf "$datadir"
        mariadb-install-db --no-defaults --datadir="$datadir" --user=root \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$LOG/mariadb-install.log" 2>&1 ||
            { show_log "$LOG/mariadb-install.log"; die "mariadb-install-db failed"; }
        fresh=1
    fi
    # A private server: own datadir and socket, TCP only on 127.0.0.1:$DB_PORT, small buffers.
    setsid mariadbd --no-defaults --user=root --datadir="$datadir" --socket="$DB_SOCK" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$RUN/mariadb.pid" \
        --log-error="$LOG/mariadb.log" --skip-log-bin --innodb-buffer-pool-size=64M \
        --innodb-log-file-size=16M --innodb-lock-wait-timeout=900 --max-connections=50 \
        </dev/null >/dev/null 2>&1 &
    wait_until 30 db_sql -e "SELECT 1" ||
        { show_log "$LOG/mariadb.log"; die "private mariadb did not start on $DB_SOCK"; }
    if ((fresh)); then
        local pw
        pw="$(cat "$ETC/db_password")"
        db_sql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
            CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
            CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pw';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
    fi
}

start_slurmdbd() {
    is_up slurmdbd && return 0
    slurmdbd || { show_log "$LOG/slurmdbd.log"; die "slurmdbd did not start"; }
    wait_until 30 sacctmgr -i -n list cluster ||
        { show_log "$LOG/slurmdbd.log"; die "slurmdbd does not answer"; }
    # slurmctld registers with the database only if its cluster exists there.
    if [[ -z "$(sacctmgr -n -P list cluster format=cluster)" ]]; then
        sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
    fi
}

start_slurmctld() {
    is_up slurmctld && return 0
    # Never -c: that would forget job ids and sacct would then mix old and new jobs.
    slurmctld || { show_log "$LOG/slurmctld.log"; die "slurmctld did not start"; }
    wait_until 20 scontrol ping ||
        { show_log "$LOG/slurmctld.log"; die "slurmctld does not answer"; }
}

start_slurmd() {
    is_up slurmd && return 0
    # The machine's hostname is not the node name, hence -N.
    slurmd -N "$NODE" || { show_log "$LOG/slurmd.log"; die "slurmd did not start"; }
}

node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1; }

node_ready() { [[ "$(node_state)" =~ ^(idle|mixed|allocated|completing)$ ]]; }

wait_node_ready() {
    local state
    if [[ "$(node_state)" =~ ^(drain|drained|draining|down) ]]; then
        scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
    fi
    wait_until 30 node_ready || {
        show_log "$LOG/slurmd.log"
        die "node $NODE is '$(node_state)', not idle; see $LOG"
    }
    state="$(node_state)"
    echo "local SLURM ready: node $NODE $state, partitions: debug (default), high" \
        "(SLURM_CONF=$SLURM_CONF)"
}

all_up() {
    local name
    for name in $DAEMONS; do is_up "$name" || return 1; done
}

cmd_start() {  # cmd_start [--clean]: --clean also cancels jobs left from an earlier run
    [[ "$(id -u)" == 0 ]] || die "run as root (it installs packages and runs the daemons as root)"
    local t0=$SECONDS t1=$SECONDS
    if all_up && node_ready; then
        say "already running"
    else
        install_packages
        t1=$SECONDS
        prepare_dirs
        start_munged
        start_mariadb
        start_slurmdbd
        start_slurmctld
        start_slurmd
    fi
    [[ "${1:-}" == --clean ]] && cancel_jobs
    wait_node_ready
    say "up in $((SECONDS - t1)) s (total $((SECONDS - t0)) s)"
}

# --- stop and status ---------------------------------------------------------------------------

all_gone() {  # all_gone PID... : none of these processes exists any more
    local pid
    for pid in "$@"; do alive "$pid" && return 1; done
    return 0
}

stop_group() {  # stop_group NAME... : SIGTERM their pid-file processes together, wait, SIGKILL
    local name pid pids=()
    for name in "$@"; do
        pid="$(pid_of "$name")" && pids+=("$pid")
        rm -f "$RUN/$name.pid"
    done
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    if ! wait_until 20 all_gone "${pids[@]}"; then
        say "$* ignored SIGTERM; sending SIGKILL to ${pids[*]}"
        kill -KILL "${pids[@]}" 2>/dev/null || true
        wait_until 5 all_gone "${pids[@]}" || true
    fi
}

no_jobs_running() { [[ -z "$(squeue -h -t RUNNING,COMPLETING,SUSPENDED -o %i 2>/dev/null)" ]]; }

cancel_jobs() {  # a running job's slurmstepd would outlive slurmd, so end the jobs first
    is_up slurmctld || return 0
    local ids
    ids="$(squeue -h -o %i 2>/dev/null | xargs)" || true
    [[ -n "$ids" ]] || return 0
    # shellcheck disable=SC2086  # one argument per job id
    scancel $ids 2>/dev/null || true
    wait_until 20 no_jobs_running || say "some jobs are still running"
}

cmd_stop() {
    [[ -d "$RUN" ]] || { say "nothing to stop in $STATE_DIR"; return 0; }
    cancel_jobs
    # Slurm first (slurmctld flushes job records to slurmdbd), the database last.
    stop_group slurmd slurmctld
    stop_group slurmdbd
    stop_group mariadb munged
    say "stopped"
}

cmd_status() {
    local name up=()
    for name in $DAEMONS; do
        is_up "$name" && up+=("$name") || up+=("$name:down")
    done
    echo "daemons: ${up[*]}"
    if is_up slurmctld; then
        sinfo
    else
        echo "local SLURM not running (scripts/local_slurm.sh start)"
        return 1
    fi
}

case "${1:-}" in
    start)
        [[ -z "${2:-}" || "$2" == --clean ]] || die "start takes only --clean, got '$2'"
        cmd_start "${2:-}"
        ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 start [--clean] | stop | status" >&2
        echo "  (state in \${STAMPEDE_SLURM_DIR:-/tmp/stampede-slurm})" >&2
        exit 2
        ;;
esac
