#!/usr/bin/env bash
# A throw-away single-node Slurm with accounting, for gaptui's Slurm tests and benchmark: no systemd, run as root.
#
#   scripts/start-slurm.sh start   # munged -> MariaDB -> slurmdbd -> slurmctld -> slurmd, waits for an idle node
#   scripts/start-slurm.sh check   # the recorded daemons are alive, the node is idle, sacct answers
#   scripts/start-slurm.sh stop    # stops only the daemons this script started (by their recorded PIDs)
#
# Needs the Debian packages: munge slurmctld slurmd slurm-client slurmdbd mariadb-server.
# State (configs' data, spool, logs, PIDs) lives in $GAPTUI_SLURM_DIR (default /var/tmp/gaptui-slurm). The configs
# go to /etc/slurm (where sbatch looks for them) and carry a marker line; an existing slurm.conf without the
# marker belongs to someone else and is never overwritten.
set -euo pipefail

STATE=${GAPTUI_SLURM_DIR:-/var/tmp/gaptui-slurm}
PIDS=$STATE/pids
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
MARKER="# written by gaptui scripts/start-slurm.sh"
DB_SOCKET=/run/mysqld/mysqld.sock
NODE=$(hostname -s)

die() {
    echo "start-slurm: $*" >&2
    exit 1
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND... (gives up at once when the daemon started last died)
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds)) last
    last=$(tail -n 1 "$PIDS")
    until "$@" >/dev/null 2>&1; do
        alive "${last#* }" || die "${last% *} exited while waiting for $what; see $STATE/log"
        ((SECONDS < deadline)) || die "timed out after ${seconds}s waiting for $what (logs in $STATE/log, MariaDB: $STATE/db/mariadb.log)"
        sleep 0.3
    done
}

record() { # record NAME PID
    echo "$1 $2" >>"$PIDS"
}

alive() { # alive PID -> whether it runs
    kill -0 "$1" 2>/dev/null
}

start() {
    [[ $(id -u) == 0 ]] || die "run as root (the daemons and /etc/slurm need it)"
    for bin in munged mariadbd slurmdbd slurmctld slurmd sbatch sacct; do
        command -v "$bin" >/dev/null || [[ -x /usr/sbin/$bin ]] || die "$bin not found; install: apt-get install -y --no-install-recommends munge slurmctld slurmd slurm-client slurmdbd mariadb-server"
    done
    if [[ -s $PIDS ]]; then
        while read -r name pid; do
            alive "$pid" && die "already started ($name pid $pid alive); run '$0 stop' first"
        done <"$PIDS"
    fi
    if [[ -e $CONF ]] && ! grep -qxF "$MARKER" "$CONF"; then
        die "$CONF exists and was not written by this script; refusing to replace it"
    fi
    for port in 6817 6818 6819; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is in use (another Slurm?)"; fi
    done
    [[ -S $DB_SOCKET ]] && mariadb-admin -S "$DB_SOCKET" ping >/dev/null 2>&1 && die "a MariaDB already listens on $DB_SOCKET"
    getent hosts "$NODE" >/dev/null || echo "127.0.0.1 $NODE" >>/etc/hosts

    rm -rf "$STATE"
    mkdir -p "$STATE"/{log,spool/ctld,spool/d,db}
    : >"$PIDS"
    export PATH=$PATH:/usr/sbin

    # munge: its own user, socket folder in /run.
    mkdir -p /run/munge
    chown munge:munge /run/munge
    chmod 755 /run/munge
    setpriv --reuid munge --regid munge --init-groups munged -F --pid-file "$STATE/munged.pid" \
        >"$STATE/log/munged.log" 2>&1 &
    record munged $!
    wait_for 20 munged bash -c 'munge -n | unmunge'

    # MariaDB: a private data folder, unix socket only.
    chown mysql:mysql "$STATE/db"
    mariadb-install-db --user=mysql --datadir="$STATE/db" --auth-root-authentication-method=socket \
        >"$STATE/log/mariadb-install.log" 2>&1
    mkdir -p /run/mysqld
    chown mysql:mysql /run/mysqld
    mariadbd --user=mysql --datadir="$STATE/db" --socket="$DB_SOCKET" --skip-networking \
        --pid-file="$STATE/db/mariadb.pid" --log-error="$STATE/db/mariadb.log" >"$STATE/log/mariadbd.out" 2>&1 &
    record mariadbd $!
    wait_for 60 MariaDB mariadb-admin -S "$DB_SOCKET" ping
    mariadb -S "$DB_SOCKET" -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'gaptui';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

    # Configs: accounting through slurmdbd; jobs share the node's cores and memory.
    local cpus mem
    cpus=$(nproc)
    mem=$(awk '/MemAvailable/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    cat >"$DBD_CONF" <<EOF
$MARKER
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=gaptui
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$DBD_CONF"
    cat >"$CONF" <<EOF
$MARKER
ClusterName=gaptui
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((mem / cpus))
SchedulerParameters=batch_sched_delay=0
MailProg=/bin/true
ReturnToService=2
KillWait=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
NodeName=$NODE CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

    slurmdbd -D >"$STATE/log/slurmdbd.out" 2>&1 &
    record slurmdbd $!
    wait_for 60 slurmdbd sacctmgr -n show cluster
    slurmctld -D -i >"$STATE/log/slurmctld.out" 2>&1 &
    record slurmctld $!
    wait_for 60 slurmctld scontrol ping
    slurmd -D >"$STATE/log/slurmd.out" 2>&1 &
    record slurmd $!
    wait_for 90 "node $NODE to be idle" bash -c "sinfo -h -n $NODE -o %t | grep -qx idle"
    wait_for 30 sacct sacct -n -X
    echo "slurm is up: node $NODE ($cpus CPUs, $mem MB), accounting on; state in $STATE"
}

check() {
    [[ -s $PIDS ]] || die "not started (no $PIDS)"
    while read -r name pid; do
        alive "$pid" || die "$name (pid $pid) is not running; see $STATE/log"
    done <"$PIDS"
    sinfo -h -n "$NODE" -o %t | grep -qxE 'idle|mix|alloc' || die "node $NODE is not up: $(sinfo -h -n "$NODE" -o '%t %E')"
    sacct -n -X >/dev/null || die "sacct does not answer"
    echo "slurm is up: $(sinfo -h -n "$NODE" -o '%n %t %c CPUs %m MB')"
}

stop() {
    [[ -s $PIDS ]] || {
        echo "start-slurm: nothing recorded in $PIDS; nothing to stop"
        return 0
    }
    # Reverse start order: the node first, the database last.
    tac "$PIDS" | while read -r name pid; do
        if alive "$pid"; then
            kill -TERM "$pid"
            for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
            if alive "$pid"; then
                echo "start-slurm: $name (pid $pid) ignored SIGTERM; killing it"
                kill -KILL "$pid"
            fi
        fi
    done
    : >"$PIDS"
    for file in "$CONF" "$DBD_CONF"; do
        [[ -e $file ]] && grep -qxF "$MARKER" "$file" && rm -f "$file"
    done
    echo "slurm stopped (logs kept in $STATE/log)"
}

case ${1:-} in
start) start ;;
check) check ;;
stop) stop ;;
*)
    echo "usage: $0 start|check|stop" >&2
    exit 2
    ;;
esac
