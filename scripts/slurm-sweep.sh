#!/usr/bin/env bash
# slurm-sweep.sh — run a vsalab sweep on a Slurm cluster: a job array of N
# shards (one GPU each) and a merge job that runs when every shard succeeded.
#
#   scripts/slurm-sweep.sh [--shards N] [--out DIR] [--vsalab PATH] [--name NAME]
#                          [--gres SPEC] [--sbatch ARG]... [--dry-run]
#                          [vsalab run options] SCRIPT [script args...]
#
#   --shards N      array tasks, each `vsalab run --shard slurm` (default 4)
#   --out DIR       where shard DBs, the merged DB and logs go; must be on a
#                   filesystem every node sees (default ./sweep-<date>-<time>)
#   --vsalab PATH   the vsalab binary, visible from every node (default: the
#                   build/vsalab beside this script)
#   --name NAME     job name (default vsalab-<script name>)
#   --gres SPEC     per array task (default gpu:1; Slurm then sets
#                   CUDA_VISIBLE_DEVICES to the GPU it gave the task;
#                   none: no --gres line, for CPU-only sweeps)
#   --sbatch ARG    one more sbatch argument for both jobs (repeatable), e.g.
#                   --sbatch --partition=gpu --sbatch --time=02:00:00
#   --dry-run       print the two batch scripts and the sbatch commands only
#   vsalab run options (--seed, --timing, --context, --point-timeout,
#   --devices, --device) go to every shard; --db, --shard and --sweep-id are
#   set here. Every argument is checked before anything is submitted: an
#   unknown option, a missing value, a missing SCRIPT, a DIR (or working
#   directory) with spaces, quotes, $, `, \ or %, or a script argument
#   that `vsalab run --check` refuses (-a, kernels=...) exits 2.
#
# Each task writes its shard DB on the node's local disk ($TMPDIR or /tmp:
# SQLite's locking is not reliable over a network filesystem) and copies it
# to DIR/shard-I.db when it ends, even after a failure, so measured rows are
# never lost. Every shard records the sweep id slurm-<array job id>. The
# merge job (--dependency=afterok:<array> --kill-on-invalid-dep=yes) runs
# `vsalab merge` into local disk and moves the result to DIR/merged.db; if
# any shard fails, Slurm cancels it and the shard DBs stay as they are (merge
# them by hand after a rerun). Prints the job ids and the merged DB's path.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
shards=4 out="" vsalab="$here/../build/vsalab" name="" gres="gpu:1" dry=0
sbatch_args=() run_opts=()

die() { echo "slurm-sweep.sh: $*" >&2; exit 2; }
# An option's value: there, and not the next option (`--out --shards 8`).
# (--sbatch's values are sbatch options: they start with '-'.)
need() { [ $# -ge 2 ] && [[ "$2" != --* ]] || die "$1 needs a value"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --shards) need "$@"; shards=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --vsalab) need "$@"; vsalab=$2; shift 2 ;;
    --name) need "$@"; name=$2; shift 2 ;;
    --gres) need "$@"; gres=$2; shift 2 ;;
    # An sbatch option starts with '-': anything else is the SCRIPT that
    # a forgotten value let --sbatch swallow.
    --sbatch) [ $# -ge 2 ] || die "--sbatch needs a value"
      [[ "$2" == -* ]] || die "--sbatch expects an sbatch option such as --partition=gpu, got '$2'"
      sbatch_args+=("$2"); shift 2 ;;
    --dry-run) dry=1; shift ;;
    --db|--shard|--sweep-id) die "$1 is set by this script (each shard gets its own DB and slice)" ;;
    --resume) die "--resume continues one run in one DB: resume a failed shard by hand (docs/cluster.md)" ;;
    --) shift; break ;;
    -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    # vsalab run's options, passed to every shard.
    --seed|--timing|--context|--point-timeout|--devices|--device)
      need "$@"; run_opts+=("$1" "$2"); shift 2 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || die "usage: slurm-sweep.sh [options] SCRIPT [script args...] (see --help)"
[[ "$shards" =~ ^[1-9][0-9]{0,4}$ ]] || die "--shards expects a count in [1, 99999], got '$shards'"
script=$1; shift
[ -f "$script" ] || die "no script $script"
[ -x "$vsalab" ] || die "no vsalab binary at $vsalab (build it, or give --vsalab PATH)"
[[ -z "$name" || "$name" =~ ^[^[:space:]]+$ ]] || die "--name expects a name without spaces, got '$name'"
[[ "$gres" =~ ^[^[:space:]]+$ ]] || die "--gres expects a spec such as gpu:1 or none, got '$gres'"
# The whole command is checked here before anything is submitted (`vsalab
# run --check`: the options' values, then the experiment's arguments and
# points, stopping before it needs a GPU, measures or opens a DB; a script
# that is not an experiment stops at its first problem.build, bench or
# logged row): a typo
# in -a or kernels= would otherwise fail every shard on the cluster. A
# script that fails on this node for another reason (exit 1: it needs the
# GPU before its experiment starts) is only warned about; the check is
# skipped when the binary does not start here (a login node without the
# CUDA libraries: exit 126/127) or predates --check.
set +e
why=$("$vsalab" run --check ${run_opts[@]+"${run_opts[@]}"} "$script" "$@" 2>&1 >/dev/null)
rc=$?
set -e
case "$rc" in
  0|126|127) ;;
  2) [[ "$why" == *"unknown option --check"* ]] || die "$(tail -1 <<< "$why" | sed 's/^vsalab: //')" ;;
  *) echo "slurm-sweep.sh: warning: could not check $script's arguments here (vsalab run --check, exit $rc): $(tail -1 <<< "$why")" >&2 ;;
esac
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
script=$(abs "$script")
vsalab=$(cd "$(dirname "$vsalab")" && pwd)/$(basename "$vsalab")
[ -n "$out" ] || out="sweep-$(date +%Y%m%d-%H%M%S)"
out=$(abs "$out")
# DIR and this directory are written into the batch scripts (#SBATCH lines,
# double-quoted shell words): a space, quote, $, `, \ or % there would break
# them on the cluster, after the shards measured, or run as commands.
plain='^[A-Za-z0-9._/+:@,=~-]+$'
[[ "$out" =~ $plain ]] || die "--out expects a path of letters, digits and ._/+:@,=~- (the batch scripts hold it), got '$out'"
[[ "$PWD" =~ $plain ]] || die "run it from a directory whose path has only letters, digits and ._/+:@,=~- (the batch scripts chdir there), not '$PWD'"
# The default job name comes from the script's file name, and goes into an
# #SBATCH line: a newline there would end the #SBATCH block and run the
# rest as a command in every task; a space would split the name.
if [ -z "$name" ]; then
  base=$(basename -- "$script" .lua)
  name="vsalab-${base//[^A-Za-z0-9._+-]/_}"
fi

# Words quoted for bash, so script arguments survive the batch script.
q() { local a; for a in "$@"; do printf '%q ' "$a"; done; }

shard_script() {
  cat <<EOF
#!/bin/bash
#SBATCH --job-name=$name
#SBATCH --array=0-$((shards - 1))
$([ "$gres" = none ] || echo "#SBATCH --gres=$gres")
#SBATCH --output=$out/logs/shard-%A_%a.out
#SBATCH --chdir=$PWD
# One shard of the sweep (vsalab run --shard slurm), written by slurm-sweep.sh.
set -uo pipefail
i=\$SLURM_ARRAY_TASK_ID
# SQLite on local disk, never on the shared filesystem.
tmp=\$(mktemp -d "\${TMPDIR:-/tmp}/vsalab-shard.XXXXXX")
echo "shard \$i of \$SLURM_ARRAY_TASK_COUNT, job \${SLURM_ARRAY_JOB_ID}_\$i on \$(hostname), CUDA_VISIBLE_DEVICES=\${CUDA_VISIBLE_DEVICES-}"
# scancel or the time limit: Slurm sends SIGTERM to every process of the
# task, so vsalab closes its run 'interrupted'; this shell outlives the
# signal, waits for vsalab, then still copies the DB.
trap ':' TERM INT
$(q "$vsalab") run --db "\$tmp/shard.db" --shard slurm --sweep-id "slurm-\$SLURM_ARRAY_JOB_ID" $(q ${run_opts[@]+"${run_opts[@]}"} "$script" "$@") &
pid=\$!
while :; do
  wait "\$pid"; rc=\$?
  [ "\$rc" -gt 128 ] && kill -0 "\$pid" 2>/dev/null && continue
  break
done
# Whatever was measured is kept, even after a failure.
if [ -f "\$tmp/shard.db" ]; then
  cp "\$tmp/shard.db" "$out/shard-\$i.db.part" && mv "$out/shard-\$i.db.part" "$out/shard-\$i.db" || rc=1
fi
rm -rf "\$tmp"
exit \$rc
EOF
}

merge_script() {
  cat <<EOF
#!/bin/bash
#SBATCH --job-name=$name-merge
#SBATCH --output=$out/logs/merge-%j.out
#SBATCH --chdir=$PWD
# Merge the shard DBs into $out/merged.db, written by slurm-sweep.sh.
set -euo pipefail
tmp=\$(mktemp -d "\${TMPDIR:-/tmp}/vsalab-merge.XXXXXX")
trap 'rm -rf "\$tmp"' EXIT
$(q "$vsalab") merge "\$tmp/merged.db" "$out"/shard-*.db
cp "\$tmp/merged.db" "$out/merged.db.part"
mv "$out/merged.db.part" "$out/merged.db"
echo "merged into $out/merged.db"
EOF
}

if [ "$dry" = 1 ]; then
  echo "# $out/shard.sbatch"
  shard_script "$@"
  echo
  echo "# $out/merge.sbatch"
  merge_script
  echo
  echo "# submitted with:"
  echo "sbatch --parsable $(q ${sbatch_args[@]+"${sbatch_args[@]}"})$out/shard.sbatch"
  echo "sbatch --parsable --dependency=afterok:<array job id> --kill-on-invalid-dep=yes $(q ${sbatch_args[@]+"${sbatch_args[@]}"})$out/merge.sbatch"
  exit 0
fi

command -v sbatch >/dev/null || die "sbatch not found: run this on a Slurm login node"
mkdir -p "$out/logs"
[ ! -e "$out/merged.db" ] || die "$out/merged.db exists: give another --out"
# The merge job takes every DIR/shard-*.db: an earlier sweep's left there
# (its merge failed or was cancelled) would be merged in as well.
! compgen -G "$out/shard-*.db" >/dev/null ||
  die "$out holds shard DBs of an earlier sweep ($(cd "$out" && echo shard-*.db)); the merge would take them too: give another --out"
shard_script "$@" > "$out/shard.sbatch"
merge_script > "$out/merge.sbatch"
jid=$(sbatch --parsable ${sbatch_args[@]+"${sbatch_args[@]}"} "$out/shard.sbatch")
jid=${jid%%;*}
mid=$(sbatch --parsable --dependency="afterok:$jid" --kill-on-invalid-dep=yes \
  ${sbatch_args[@]+"${sbatch_args[@]}"} "$out/merge.sbatch")
mid=${mid%%;*}
echo "array job $jid: $shards shards of $(basename "$script"), sweep id slurm-$jid"
echo "merge job $mid: runs when every shard succeeded (cancelled if one fails)"
echo "merged DB: $out/merged.db"
echo "shard DBs: $out/shard-*.db   logs: $out/logs/"
echo "watch: squeue -j $jid,$mid"
