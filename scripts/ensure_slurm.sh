#!/usr/bin/env bash
# Make sure a real single-node Slurm runs for the tests and print the path of its slurm.conf
# (callers export SLURM_CONF to it); everything else goes to stderr.
#
#   scripts/ensure_slurm.sh        install, configure and start what is missing (idempotent)
#   scripts/ensure_slurm.sh stop   stop the Slurm daemons (and munged if this script started it)
#
# Debian 12's packages (Slurm 22.05): munged -> slurmdbd (accounting, on the machine's MariaDB
# at 127.0.0.1:3306) -> slurmctld -> slurmd, all as root, without systemd or cgroups. Cluster
# `specledger`, one node `localhost` with 16 CPUs (more than the machine has, so that several
# 1-CPU jobs run side by side) and two fake GPUs (character devices); partitions `debug`
# (default) and `inference`; accounts `search` and `ads` for root.
#
# The configuration, state, logs and pid files live in ${SPECLEDGER_SLURM_DIR:-/tmp/specledger-slurm}.
# Slurm's ports (6817-6819) are per machine, so there is one such cluster per machine.
set -euo pipefail

DIR="$(realpath -m "${SPECLEDGER_SLURM_DIR:-/tmp/specledger-slurm}")"
CONF="$DIR/slurm.conf"
CLUSTER=specledger
ACCOUNTS=(search ads)
DB_NAME=specledger_slurm_acct
DB_USER=specledger_slurm
DB_PASSWORD=specledger_slurm
WAIT_S=90
export SLURM_CONF="$CONF" TZ=UTC PATH="$PATH:/usr/sbin:/sbin"

log() { echo "ensure_slurm: $*" >&2; }

# Print why we stop, the tail of the log that tells more, and exit non-zero.
die() {
    log "$1"
    if [ -n "${2:-}" ] && [ -r "$2" ]; then
        log "last lines of $2:"
        tail -n 40 "$2" >&2
    fi
    exit 1
}

# Whether the daemon NAME runs with the pid in PIDFILE (a stale file's pid may be reused, and
# PID 1 here is slow to reap: a zombie has not stopped yet but no longer runs).
running() {
    local pid
    [ -r "$2" ] && pid="$(cat "$2" 2>/dev/null)" && [ -n "$pid" ] &&
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] &&
        ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# Run a daemon detached from us: its own session, no stdin/stdout (a caller reading our
# stdout through a pipe would wait for the daemon's end) and not the lock's descriptor.
launch() {
    local out="$1"
    shift
    setsid "$@" </dev/null >>"$out" 2>&1 9>&-
}

# Start daemon NAME (listening on PORT, logging to LOG) with CMD... unless another process
# holds the port: most likely a cluster from another SPECLEDGER_SLURM_DIR, which commands would
# otherwise reach instead of ours.
start_daemon() {
    local name="$1" port="$2" logfile="$3"
    shift 3
    if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
        die "port $port is taken, so $name cannot start (another Slurm cluster? stop it first)"
    fi
    log "starting $name"
    launch "$DIR/log/$name.out" "$@" || die "$name did not start" "$logfile"
}

# Poll CMD... (quiet) until it succeeds or WAIT_S seconds pass.
wait_until() {
    local deadline=$((SECONDS + WAIT_S))
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}

stop_daemon() { # NAME PIDFILE
    running "$1" "$2" || return 0
    local pid
    pid="$(cat "$2")"
    log "stopping $1 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
        running "$1" "$2" || return 0
        sleep 0.5
    done
    kill -KILL "$pid" 2>/dev/null || true
}

stop_all() {
    stop_daemon slurmd "$DIR/run/slurmd.pid"
    stop_daemon slurmctld "$DIR/run/slurmctld.pid"
    stop_daemon slurmdbd "$DIR/run/slurmdbd.pid"
}

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock -w 900 9 || die "another ensure_slurm.sh has held $DIR/.lock for 15 minutes"

if [ "${1:-}" = "stop" ]; then
    stop_all
    if [ -e "$DIR/run/munged.ours" ]; then
        stop_daemon munged /run/munge/munged.pid
        rm -f "$DIR/run/munged.ours"
    fi
    exit 0
elif [ -n "${1:-}" ]; then
    die "usage: $0 [stop]"
fi

# --- packages ---------------------------------------------------------------------------
# Their postinst scripts start nothing harmful: the slurm init scripts exit 0 without
# /etc/slurm/slurm.conf (we never write it), and munged, if policy-rc.d lets it start, is the
# one we want. Debian's image keeps policy-rc.d (exit 101), so we start munged ourselves.
packages=()
command -v slurmctld >/dev/null 2>&1 || packages+=(slurm-wlm)
command -v slurmdbd >/dev/null 2>&1 || packages+=(slurmdbd)
command -v munged >/dev/null 2>&1 || packages+=(munge)
command -v mariadbd >/dev/null 2>&1 || command -v mysqld >/dev/null 2>&1 || packages+=(mariadb-server)
if [ "${#packages[@]}" -gt 0 ]; then
    log "installing ${packages[*]} from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt_install() {
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${packages[@]}" >&2
    }
    if ! apt_install; then
        apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
        apt_install
    fi
fi

# --- MariaDB ------------------------------------------------------------------------------
# 0 when the server answers, even if it denies access.
mariadb_up() { mariadb-admin --connect-timeout=2 -h127.0.0.1 -P3306 ping >/dev/null 2>&1; }
if ! mariadb_up; then
    log "starting MariaDB"
    install -d -o mysql -g mysql /run/mysqld /var/log/mysql
    setsid -f mariadbd-safe </dev/null >/dev/null 2>&1 9>&-
    wait_until mariadb_up || die "MariaDB does not answer on 127.0.0.1:3306" /var/log/mysql/error.log
fi
# The admin connection: root over TCP without a password (this project's machines), else root
# over the socket (a fresh Debian install authenticates root by unix_socket).
if mariadb -h127.0.0.1 -P3306 -uroot -e 'SELECT 1' >/dev/null 2>&1; then
    db_admin=(mariadb -h127.0.0.1 -P3306 -uroot)
elif mariadb -uroot -e 'SELECT 1' >/dev/null 2>&1; then
    db_admin=(mariadb -uroot)
else
    die "cannot log in to MariaDB as root (neither 127.0.0.1 without a password nor the socket)"
fi
# slurmdbd logs in as its own user, whatever root's authentication is.
"${db_admin[@]}" -e "
    CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
    CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
    GRANT ALL ON \`$DB_NAME\`.* TO '$DB_USER'@'127.0.0.1';
    GRANT ALL ON \`$DB_NAME\`.* TO '$DB_USER'@'localhost';"

# --- configuration ------------------------------------------------------------------------
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run" "$DIR/dev"
for gpu in 0 1; do
    # Fake GPUs: slurmd only needs character devices to hand out (these are /dev/null's).
    [ -c "$DIR/dev/fakegpu$gpu" ] || mknod "$DIR/dev/fakegpu$gpu" c 1 3
done

changed=0
# Install the text on stdin as FILE (mode MODE) if it differs; remember that it changed.
put() {
    local tmp="$1.new"
    cat >"$tmp"
    chmod "$2" "$tmp"
    if cmp -s "$tmp" "$1"; then
        rm -f "$tmp"
    else
        mv -f "$tmp" "$1"
        changed=1
    fi
}

put "$CONF" 644 <<EOF
# Written by scripts/ensure_slurm.sh: edit the script, not this file.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# No cgroups on these machines.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# The node has what slurm.conf says, not what the hardware has (2 cores).
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
ReturnToService=2
KillWait=2
InactiveLimit=0
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
# Typed GPU TRES (gres/gpu:fake) are recorded only when listed.
AccountingStorageTRES=gres/gpu,gres/gpu:fake
JobCompType=jobcomp/none
GresTypes=gpu
NodeName=localhost CPUs=16 Boards=1 SocketsPerBoard=1 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=16000 Gres=gpu:fake:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=inference Nodes=localhost MaxTime=INFINITE State=UP
EOF

put "$DIR/gres.conf" 644 <<EOF
NodeName=localhost Name=gpu Type=fake File=$DIR/dev/fakegpu[0-1]
EOF

put "$DIR/slurmdbd.conf" 600 <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=$DB_USER
StoragePass=$DB_PASSWORD
StorageLoc=$DB_NAME
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=info
EOF

if [ "$changed" = 1 ]; then
    # A daemon started with the old files must not go on with them.
    stop_all
fi

# --- munged -------------------------------------------------------------------------------
munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
    log "starting munged"
    if [ ! -s /etc/munge/munge.key ]; then
        runuser -u munge -- mungekey --create >&2
    fi
    install -d -o munge -g munge -m 755 /run/munge
    launch "$DIR/log/munged.out" runuser -u munge -- munged --force ||
        die "munged did not start" /var/log/munge/munged.log
    touch "$DIR/run/munged.ours"
    wait_until munge_ok || die "munged does not answer" /var/log/munge/munged.log
fi

# --- slurmdbd -----------------------------------------------------------------------------
clusters() { timeout 10 sacctmgr -n -P show cluster format=Cluster 2>/dev/null; }
dbd_up() { clusters >/dev/null; }
if ! running slurmdbd "$DIR/run/slurmdbd.pid"; then
    start_daemon slurmdbd 6819 "$DIR/log/slurmdbd.log" slurmdbd
fi
wait_until dbd_up || die "slurmdbd does not answer" "$DIR/log/slurmdbd.log"
# Register the cluster before slurmctld first connects.
if ! grep -qx "$CLUSTER" <<<"$(clusters)"; then
    sacctmgr -i add cluster "$CLUSTER" >&2
fi

# --- slurmctld, slurmd ----------------------------------------------------------------------
if ! running slurmctld "$DIR/run/slurmctld.pid"; then
    start_daemon slurmctld 6817 "$DIR/log/slurmctld.log" slurmctld -i -f "$CONF"
fi
controller_up() { [[ "$(timeout 10 scontrol ping 2>/dev/null)" == *"is UP"* ]]; }
wait_until controller_up || die "slurmctld does not answer" "$DIR/log/slurmctld.log"

if ! running slurmd "$DIR/run/slurmd.pid"; then
    start_daemon slurmd 6818 "$DIR/log/slurmd.log" slurmd -N localhost -f "$CONF"
fi
node_ready() {
    local state
    state="$(timeout 10 sinfo -h -n localhost -o %T 2>/dev/null)" || return 1
    case "$state" in
        idle | mixed | allocated | completing) return 0 ;;
        drained | draining | down)
            # Nothing else would bring it back (a step linuxproc could not kill drains it).
            log "node localhost is $state ($(sinfo -h -n localhost -o %E)): resuming it"
            scontrol update NodeName=localhost State=RESUME >&2 || true
            ;;
    esac
    return 1
}
if ! wait_until node_ready; then
    log "node state: $(sinfo -h -n localhost -o '%T %E' 2>&1)"
    die "the node localhost is not ready" "$DIR/log/slurmd.log"
fi

# --- accounts -----------------------------------------------------------------------------
for account in "${ACCOUNTS[@]}"; do
    if [ -z "$(sacctmgr -n -P show account "$account" format=Account)" ]; then
        sacctmgr -i add account "$account" Cluster="$CLUSTER" Description="$account" Organization=specledger >&2
    fi
done
root_accounts="$(sacctmgr -n -P show assoc where user=root cluster="$CLUSTER" format=Account)"
for account in "${ACCOUNTS[@]}"; do
    if ! grep -qx "$account" <<<"$root_accounts"; then
        sacctmgr -i add user root Account="$account" Cluster="$CLUSTER" >&2
    fi
done
if [ "$(sacctmgr -n -P show user root format=DefaultAccount)" != "${ACCOUNTS[0]}" ]; then
    sacctmgr -i modify user root set DefaultAccount="${ACCOUNTS[0]}" >&2
fi

# The commands above may have reached daemons that were ours and then died: check again.
running slurmdbd "$DIR/run/slurmdbd.pid" || die "slurmdbd exited" "$DIR/log/slurmdbd.log"
running slurmctld "$DIR/run/slurmctld.pid" || die "slurmctld exited" "$DIR/log/slurmctld.log"
running slurmd "$DIR/run/slurmd.pid" || die "slurmd exited" "$DIR/log/slurmd.log"
echo "$CONF"
