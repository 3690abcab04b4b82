#!/bin/bash
# The documents the CLI writes on the committed fixtures, at two commits, compared byte
# for byte (issue 24: "the same JSON documents before and after").
#
#   benchmarks/same_docs.sh 6b2033f HEAD
#
# For each commit: `git archive` of domino_prof/ into a temp dir, then with it on
# PYTHONPATH: analyze -o *.json (run dir, --mode tp, two-stream, gloo, gloo with every
# reading option), baseline, check --junit/--markdown, check --baseline, report,
# compare, and `run --reanalyze` of copies of both fixture run directories
# (analysis.json per mode, run.json). JSON/XML/MD must be equal bytes; the HTML pages
# equal once their timestamp and plotly's div UUIDs are blanked; logs equal once the
# output directory's name is. Exit 1 on any difference.
set -u
A=${1:?commit A}; B=${2:?commit B}
ROOT=$(cd "$(dirname "$0")/.." && pwd); D=$ROOT/tests/data
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
for side in a b; do
  rev=$A; [ $side = b ] && rev=$B
  mkdir -p "$W/$side/src" "$W/$side/out"
  git -C "$ROOT" archive "$rev" domino_prof | tar -x -C "$W/$side/src"
  O=$W/$side/out; P=$W/$side/src
  run() { name=$1; shift; (cd "$W" && PYTHONPATH=$P python -m domino_prof.cli "$@" > "$O/$name.log" 2>&1; echo "rc=$?" >> "$O/$name.log"); }
  run run-domino analyze $D/h200_llama3_3b_2layers_tp2 -o $O/run-domino.json
  run run-tp analyze $D/h200_llama3_3b_2layers_tp2 --mode tp -o $O/run-tp.json
  run two analyze $D/h200_two_stream -o $O/two.json
  run gloo analyze $D/cpu_gloo_tp2 -o $O/gloo.json
  run gloo-opts analyze $D/cpu_gloo_tp2 --memcpy-as-comm --comm-pattern gloo --threshold top_n=3 --no-align-clocks -o $O/gloo-opts.json
  run file-rank analyze $D/h200_two_stream/rank1.pt.trace.json.gz --rank 1 -o $O/file-rank.json
  run base baseline $D/h200_llama3_3b_2layers_tp2 -o $O/base.json
  run check check $D/h200_llama3_3b_2layers_tp2 --min-hidden 10 --max-exposed-ms 5 --junit $O/check.xml --markdown $O/check.md
  run checkb check $D/h200_llama3_3b_2layers_tp2/domino --baseline $D/h200_llama3_3b_2layers_tp2/overlap-baseline.json --max-drop 1 --comm-pattern nccl
  run report report $D/h200_llama3_3b_2layers_tp2 -o $O/report.html
  run compare compare $D/h200_llama3_3b_2layers_tp2/tp $D/h200_llama3_3b_2layers_tp2/domino -o $O/compare.html
  for r in cpu_gloo_tp2 h200_llama3_3b_2layers_tp2; do
    cp -r $D/$r "$W/$side/run-$r"
    run reanalyze-$r run --reanalyze "$W/$side/run-$r"
    for f in run.json tp/analysis.json domino/analysis.json; do
      cp "$W/$side/run-$r/$f" "$O/reanalyze-$r-${f//\//-}"
    done
  done
done
norm() { sed -E "s#$W/[ab]/#W/#g; s/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC//g; s/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/UUID/g" "$1"; }
bad=0
for f in "$W"/a/out/*; do
  n=$(basename "$f")
  case $n in
    *.html|*.log|reanalyze-*) if cmp -s <(norm "$f") <(norm "$W/b/out/$n"); then s=same; else s=DIFF; bad=1; fi ;;
    *) if cmp -s "$f" "$W/b/out/$n"; then s=same; else s=DIFF; bad=1; fi ;;
  esac
  echo "$s $n ($(wc -c < "$f") bytes)"
done
[ $bad = 0 ] && echo "all the same: $A $B" || echo "DIFFERENT: $A $B"
exit $bad
