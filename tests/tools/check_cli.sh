#!/usr/bin/env bash
# The command lines of the installed tools: every option their source
# accepts is described in their help (a help line that starts with it), and
# bad or out-of-range arguments exit 2 with a message and nothing on stdout.
# The benchmarks (when built) also: -r out of range under mpiexec, and an
# unmeasured column (spread at --repeat 1, #wrong with -c 0) prints "-".
#   check_cli.sh SOURCE_DIR FLAGCX_INFO FLAGCX_ALGO FLAGCX_DEMO [PERF_DIR]
set -uo pipefail
src=$1 info=$2 algo=$3 demo=$4 perf=${5:-}
export UCX_NET_DEVICES=lo
bad=0
# MPICH unloads its UCX modules at MPI_Finalize and LeakSanitizer then
# reports their allocations (tools/check.sh): no leak check under mpiexec.
mpi_run() { ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 mpiexec "$@"; }
no() { echo "FAIL: $*"; bad=1; }

# helps TOOL_LABEL HELP_TEXT OPTION...: each option starts a line of the
# help ("  -x ...", "  --xy ..." or "  -x, --xy ...").
helps() {
  local label=$1 text=$2 o described
  shift 2
  described=$(awk '/^  -/ { o = $1; sub(",$", "", o); print o; if ($1 ~ /,$/) print $2 }' <<<"$text")
  for o in $(printf '%s\n' "$@" | grep -vxF -- "$described"); do no "$label help does not describe $o"; done
}
# refuses WANT_LINE_PART command...: exit 2, the part in its stderr, empty stdout.
errfile=$(mktemp)
trap 'rm -f "$errfile"' EXIT
refuses() {
  local part=$1 out err code
  shift
  out=$("$@" 2>"$errfile")
  code=$?
  err=$(<"$errfile")
  [ "$code" = 2 ] || no "'${*##*/}' exited $code, not 2"
  [ -z "$out" ] || no "'${*##*/}' printed on stdout: $(head -2 <<<"$out")"
  [[ $err == *"$part"* ]] || no "'${*##*/}' said '$err', not '$part'"
}
opts_of() { grep -oE '"--?[a-zA-Z][a-zA-Z-]*"' "$1" | tr -d '"' | sort -u; }

helps flagcx-info "$("$info" --help)" $(opts_of "$src/tools/info/flagcx-info.cc")
refuses "unknown option --bogus" "$info" --bogus
refuses "--compare-dumps needs at least one FILE" "$info" --compare-dumps
refuses "--version takes no argument" "$info" --version extra
# Dumps are read whole: a device or a folder is refused by name, never read.
dumps=$(timeout 20 "$info" --compare-dumps /dev/zero / 2>&1)
[ $? = 2 ] && [[ $dumps == *"/dev/zero: a character device, not a regular file"* ]] ||
  no "flagcx-info --compare-dumps /dev/zero /: $dumps"
[ "$("$info" --version | grep -cE '^flagcx [0-9]+\.[0-9]+\.[0-9]+, FlagCX API [0-9]+\.[0-9]+\.[0-9]+$')" = 1 ] ||
  no "flagcx-info --version: $("$info" --version)"

helps flagcx-algo "$("$algo" --help)" $(opts_of "$src/tools/algo/flagcx-algo.cc")
refuses "--rank 5 is out of range at --nranks 3 (0..2)" "$algo" show allreduce/ring --nranks 3 --rank 5
refuses "--root 3 is out of range at --nranks 3 (0..2)" "$algo" dot broadcast/ring --nranks 3 --root 3
refuses "--ranks-per-host 3 does not divide --nranks 4" "$algo" show allreduce/ring -n 4 --ranks-per-host 3
refuses "bad --nranks range '5-3'" "$algo" verify allreduce/ring -n 5-3
refuses "bad --nranks: '0'" "$algo" verify allreduce -n 0
refuses "cost needs --bytes" "$algo" cost allreduce -n 4
refuses "bad --alpha: 'x'" "$algo" cost allreduce -n 4 --bytes 1M --alpha x
refuses "bad --repeat: '0'" "$algo" scale -n 4 --repeat 0
refuses "list does not take --nranks" "$algo" list --nranks 3
refuses "show does not take --jobs" "$algo" show allreduce/ring -n 2 --jobs 2
refuses "scale takes no TARGET" "$algo" scale allreduce -n 4
refuses "unknown command 'bogus'" "$algo" bogus

helps flagcx-demo "$("$demo" --help)" -n -h --help
refuses "-n 0: a number of ranks from 1 to 64" "$demo" -n 0
refuses "unknown argument -x" "$demo" -x

if [ -n "$perf" ]; then
  optstring=$(sed -n 's/.*getopt_long(argc, argv, "\([^"]*\)".*/\1/p' "$src/tools/perf/options.cc")
  letters=$(tr -d ':' <<<"$optstring" | grep -o .)
  longs=$(grep -oE '\{"[a-z]+", (no|required)_argument' "$src/tools/perf/options.cc" | sed 's/{"\([a-z]*\)".*/--\1/')
  for t in "$perf"/test_*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    name=${t##*/}
    text=$("$t" -h) || no "$name -h exited $?"
    case $name in
      test_put|test_get|test_putsignal)
        # Their own flags are described; any other is refused.
        for l in $letters; do
          [[ $'\n'$text == *$'\n'"  -$l"[\ ,]* ]] && continue
          refuses "-$l is not a flag of the one-sided benchmarks" "$t" "-$l" 1
        done
        helps "$name" "$text" -b -e -f -w -W -n -T -c -m -h --help
        refuses "--repeat is not a flag of the one-sided benchmarks" "$t" --repeat 2 ;;
      *) helps "$name" "$text" $(sed 's/^/-/' <<<"$letters") $longs ;;
    esac
  done
  ar=$perf/test_allreduce
  refuses "bad value for --repeat: 0" "$ar" --repeat 0
  refuses "bad value for -f: 0" "$ar" -f 0
  refuses "-b is larger than -e" "$ar" -b 2K -e 1K
  refuses "bad value for -d: float99" "$ar" -d float99
  refuses "-f 1: the one-sided benchmarks need a factor of at least 2" "$perf/test_put" -f 1
  refuses "-r 2 is out of range: 2 ranks (0..1)" mpi_run -n 2 "$perf/test_broadcast" -r 2
  quick=(-b 1K -e 1K -w 1 -n 2 -W 0 -T 0 -m 1)
  # A data row: spread (column 7) and the MPI spread (12) are "-" at --repeat 1,
  # #wrong (10) with -c 0; measured at --repeat 2.
  row=$(mpi_run -n 2 "$ar" "${quick[@]}" -c 0)
  row=$(grep -v '^#' <<<"$row" | head -1)
  [ "$(awk '{print $7, $10, $12}' <<<"$row")" = "- - -" ] || no "unmeasured columns at --repeat 1 -c 0: $row"
  row=$(mpi_run -n 2 "$ar" "${quick[@]}" --repeat 2)
  row=$(grep -v '^#' <<<"$row" | head -1)
  awk '{exit !($7 ~ /^[0-9.]+$/ && $10 == "0" && $12 ~ /^[0-9.]+$/)}' <<<"$row" || no "measured columns at --repeat 2: $row"
fi
[ $bad = 0 ] && echo "tool command lines: OK"
exit $bad
