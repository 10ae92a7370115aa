#!/usr/bin/env bash
# data.sh OCTOPIPE SRCDIR: token files end to end (docs/data.md).
#
#   same stream   `octopipe tokenize` of the bundled text, read as u16 and
#                 as u32, whole and cut into shards at odd places, gives
#                 tiny-hybrid the losses and final model hash of the text
#                 itself, bit for bit, on 1 rank and 4 ranks zbv (and on 2
#                 replicas of 2 stages as the text does there): a token per
#                 byte is the same stream, and a sample's tokens do not
#                 depend on the plan or on how the stream is cut; the same
#                 through the YAML's training.data: tokens
#   fine-tune     a checkpoint of the text resumed on other data: refused
#                 without --data-position (the message says which to give);
#                 with reset, on the text from sample 16 on, bit for bit the
#                 text's own continuation; with keep, the same position in
#                 the other data; --data-position without --resume refused
#   bad data      a size that is not whole tokens, a token outside the
#                 vocabulary, an empty file, a directory, /dev/null, a FIFO,
#                 mixed formats, ranks given different data or resume rules: a
#                 non-zero exit naming the file (or both ranks) before step 1,
#                 never a hang;
#                 tokenize's own refusals (a device such as /dev/zero among
#                 them); an output that is a FIFO written through, not replaced
#
# Exit 0 all pass, 1 a failure, 77 (skip) without mpirun.
set -u
octopipe=$1
src=$2
steps=3
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" # skips without mpirun; $tmp, removed at exit
MPIRUN=(mpirun)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
	MPIRUN+=(--oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
	[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
fi
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

corpus=$src/models/data/corpus.txt
yaml=$src/models/tiny-hybrid.yaml

# compile NAME YAML ARGS...: the model into $tmp/NAME.
compile() {
	local name=$1 model=$2
	shift 2
	"$octopipe" compile "$model" -o "$tmp/$name" "$@" >"$tmp/$name.compile" 2>&1 ||
		{ bad "compile $name"; tail -5 "$tmp/$name.compile" | sed 's/^/  | /'; exit 1; }
}

# train RUN PROG ARGS...: $tmp/PROG/launch, its "STEP HEXLOSS" lines and
# the model hash in $tmp/RUN.out; 1 (said) when it fails.
train() {
	local run=$1 prog=$2
	shift 2
	if ! timeout 600 "$tmp/$prog/launch" "$@" >"$tmp/$run.log" 2>&1; then
		bad "$run: the job failed"
		tail -8 "$tmp/$run.log" | sed 's/^/  | /'
		return 1
	fi
	{
		sed -n 's/^step \([0-9]*\) loss [^ ]* (\([^)]*\)).*/\1 \2/p' "$tmp/$run.log"
		sed -n 's/^model hash \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$run.log"
	} >"$tmp/$run.out"
}

# same RUN REF WHAT: RUN's losses and model hash are REF's, bit for bit.
same() {
	if [ -s "$tmp/$2.out" ] && cmp -s "$tmp/$1.out" "$tmp/$2.out"; then
		ok "$3"
	else
		bad "$3"
		diff "$tmp/$2.out" "$tmp/$1.out" | head -8 | sed 's/^/  | /'
	fi
}

# refused WHAT PATTERN CMD...: exits non-zero within the time limit with
# PATTERN (fixed) in its output, before step 1.
refused() {
	local what=$1 pat=$2
	shift 2
	timeout 120 "$@" >"$tmp/log" 2>&1
	local rc=$?
	if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -qF -- "$pat" "$tmp/log" &&
		! grep -q '^step 1 loss' "$tmp/log"; then
		ok "$what (exit $rc)"
	else
		bad "$what: exit $rc, expected '$pat' before step 1"
		tail -6 "$tmp/log" | sed 's/^/  | /'
	fi
}

# ---- the token files -------------------------------------------------------
"$octopipe" tokenize "$corpus" -o "$tmp/corpus.bin" >"$tmp/tok.log" 2>&1 &&
	"$octopipe" tokenize "$corpus" -o "$tmp/corpus.u32" >>"$tmp/tok.log" 2>&1 &&
	"$octopipe" tokenize "$corpus" -o "$tmp/corpus.tok" --format u32 >>"$tmp/tok.log" 2>&1 ||
	{ bad "tokenize"; sed 's/^/  | /' "$tmp/tok.log"; exit 1; }
n=$(wc -c <"$corpus")
if [ "$(wc -c <"$tmp/corpus.bin")" = $((2 * n)) ] && [ "$(wc -c <"$tmp/corpus.u32")" = $((4 * n)) ] &&
	cmp -s "$tmp/corpus.u32" "$tmp/corpus.tok" &&
	[ "$(head -c 6 "$tmp/corpus.bin" | od -An -tu1 | tr -s ' ')" = \
	  "$(head -c 3 "$corpus" | od -An -tu1 | awk '{printf " %s 0 %s 0 %s 0\n", $1, $2, $3}')" ] &&
	grep -q "note: the ranks read $tmp/corpus.tok as text by its name: give them --data-format u32" "$tmp/tok.log"; then
	ok "tokenize: $n bytes -> $n tokens, u16 (.bin) and u32 (.u32 by name, --format u32), little-endian"
else
	bad "tokenize: sizes or bytes"
	sed 's/^/  | /' "$tmp/tok.log"
fi
# Shards: the u16 tokens cut at an odd token (a window spans the cut), the
# u32 ones in three.
head -c 20002 "$tmp/corpus.bin" >"$tmp/s1.bin"
tail -c +20003 "$tmp/corpus.bin" >"$tmp/s2.bin"
head -c 40000 "$tmp/corpus.u32" >"$tmp/t1.u32"
head -c 40012 "$tmp/corpus.u32" | tail -c 12 >"$tmp/t2.u32"
tail -c +40013 "$tmp/corpus.u32" >"$tmp/t3.u32"

# ---- the same stream, whatever its encoding, cuts and plan ------------------
compile h1 "$yaml" --devices 1 --schedule 1f1b
compile h4 "$yaml" --devices 4 --schedule zbv
compile d2 "$yaml" --devices 4 --dp 2 --schedule 1f1b
train text h1 --steps $steps || exit 1
same_all() {
	local run=$1 prog=$2 what=$3
	shift 3
	train "$run" "$prog" --steps $steps "$@" && same "$run" text "$what: the text's losses and model hash"
}
same_all u16 h1 "1 rank, corpus.bin (u16)" --data "$tmp/corpus.bin"
same_all u32 h1 "1 rank, corpus.u32" --data "$tmp/corpus.u32"
same_all fmt h1 "1 rank, corpus.tok --data-format u32" --data "$tmp/corpus.tok" --data-format u32
same_all shards16 h4 "4 ranks zbv, two u16 shards" --data "$tmp/s1.bin,$tmp/s2.bin"
same_all shards32 h4 "4 ranks zbv, three u32 shards" --data "$tmp/t1.u32,$tmp/t2.u32,$tmp/t3.u32"
# Replicas sum their gradients in another order than 1 rank (bits apart
# without --deterministic): the text on the same plan is the reference.
train dptext d2 --steps $steps &&
	train dp d2 --steps $steps --data "$tmp/s1.bin,$tmp/s2.bin" &&
	same dp dptext "2 replicas x 2 stages, two u16 shards: the text's losses and model hash on that plan"
# The YAML's own token files (training.data: tokens): named by absolute
# path in the programs, not copied; token_format for a name of no width.
tokyaml() {
	sed -e 's#^  data: text#  data: tokens#' -e "s#^  text_file: .*#$1#" "$yaml" >"$tmp/$2.yaml"
}
tokyaml "  token_files: [$tmp/t1.u32, $tmp/t2.u32, $tmp/t3.u32]" y32
tokyaml "  token_files: corpus.tok\n  token_format: u32" ytok
compile y32 "$tmp/y32.yaml" --devices 3 --schedule 1f1b
compile ytok "$tmp/ytok.yaml" --devices 1 --schedule 1f1b
grep -q "^train .* data=tokens tokens=\"$tmp/t1.u32,$tmp/t2.u32,$tmp/t3.u32\" token_format=auto$" "$tmp/y32/plan.opir" &&
	[ ! -e "$tmp/y32/t1.u32" ] && ok "data: tokens in the YAML: the plan names the files by absolute path, none copied" ||
	bad "data: tokens: $(grep '^train' "$tmp/y32/plan.opir")"
same_all y32 y32 "3 ranks 1f1b, the YAML's three u32 shards"
same_all ytok ytok "1 rank, the YAML's corpus.tok with token_format: u32"
# data: text is text whatever the file's name (the copy keeps the name).
cp "$corpus" "$tmp/text-named.bin"
sed "s#^  text_file: .*#  text_file: text-named.bin#" "$yaml" >"$tmp/ybin.yaml"
compile ybin "$tmp/ybin.yaml" --devices 1 --schedule 1f1b
same_all ybin ybin "1 rank, the YAML's text_file named .bin: read as text"
same_all ytext ytok "the YAML's tokens replaced by --data (the text, read as text by its name)" --data "$corpus"
# --data-format over the YAML's token_format: the u32 file read as u16
# (each byte's token, then a 0) is another stream.
train yfmt ytok --steps 1 --data-format u16 &&
	[ "$(sed -n 1p "$tmp/yfmt.out")" != "$(sed -n 1p "$tmp/text.out")" ] &&
	ok "--data-format u16 over the YAML's token_format u32: another stream, another loss" ||
	bad "--data-format over the YAML's token_format: the same first loss"
first=$(sed -n 1p "$tmp/text.out" | awk '{print $2}')

# ---- fine-tuning: a resume on other data -------------------------------------
# Two steps of the text are samples 0..15 (8 micro-batches of 2 sequences
# of 64 bytes: windows 0..31); the text from byte 2048 on (window 32) is
# "other data" whose sample 0 is the text's sample 16.
train ck h4 --steps 2 --checkpoint "$tmp/ck" &&
	train cont h4 --steps 1 --resume "$tmp/ck" || exit 1
tail -c +2049 "$corpus" >"$tmp/tail.txt"
"$octopipe" tokenize "$tmp/tail.txt" -o "$tmp/tail.bin" >/dev/null 2>&1
refused "resume on other data without --data-position: refused, the rule suggested" \
	"data mismatch: the checkpoint was trained on text 0x" \
	"$tmp/h4/launch" --steps 1 --resume "$tmp/ck" --data "$tmp/tail.bin"
grep -qF "give --data-position reset (from its first sample) or keep (from sample 16, the checkpoint's position)" "$tmp/log" &&
	ok "the refusal names both rules and the checkpoint's position" || bad "the refusal's advice: $(grep -m1 error: "$tmp/log")"
refused "--data-position without --resume: refused" "--data-position reset needs --resume DIR" \
	"$tmp/h4/launch" --steps 1 --data-position reset
refused "--data-position other: refused" "--data-position is reset or keep, not 'rewind'" \
	"$tmp/h4/launch" --steps 1 --resume "$tmp/ck" --data-position rewind
if train reset h4 --steps 1 --resume "$tmp/ck" --data "$tmp/tail.bin" --data-position reset &&
	train reset1 h1 --steps 1 --resume "$tmp/ck" --data "$tmp/tail.txt" --data-position reset; then
	same reset cont "reset on the text's tail (u16): step 3 is the text's own continuation, bit for bit"
	same reset1 cont "the same on 1 rank from the 4-rank checkpoint, the tail as text"
	grep -q '^step 3 ' "$tmp/reset.log" && ok "reset keeps the step count (step 3)" || bad "reset: no step 3"
fi
if train keep h4 --steps 1 --resume "$tmp/ck" --data "$tmp/tail.bin" --data-position keep --checkpoint "$tmp/ck2"; then
	if ! cmp -s "$tmp/keep.out" "$tmp/cont.out" && grep -q '^step 3 ' "$tmp/keep.log"; then
		ok "keep on the tail: step 3 from sample 16 of the tail, another loss"
	else
		bad "keep on the tail: the loss of the text's continuation, or no step 3"
	fi
	man=$tmp/ck2/$(cat "$tmp/ck2/current")/manifest
	grep -q "^data u16 0x" "$man" && grep -q "^data_pos 24$" "$man" &&
		ok "the fine-tuned checkpoint records the new data (u16) and its position (24)" ||
		bad "the fine-tuned checkpoint's manifest: $(grep '^data' "$man")"
	train again h4 --steps 1 --resume "$tmp/ck2" --data "$tmp/tail.bin" &&
		ok "the fine-tuned checkpoint resumes on its data without a rule"
fi

# ---- bad data: refused, naming the file, on every plan's ranks ---------------
head -c 1001 "$tmp/corpus.bin" >"$tmp/odd.bin"
{ head -c 1000 "$tmp/corpus.bin"; printf '\x00\x01'; tail -c +1003 "$tmp/corpus.bin"; } >"$tmp/high.bin"
: >"$tmp/empty.bin"
mkdir "$tmp/dir.bin"
mkfifo "$tmp/fifo.bin"
head -c 100 "$tmp/corpus.bin" >"$tmp/short.bin"
refused "a size that is not whole u16 tokens" \
	"token file $tmp/odd.bin: 1001 bytes, not a whole number of u16 tokens (2 bytes each)" \
	"$tmp/h4/launch" --steps 1 --data "$tmp/odd.bin"
refused "a token outside the vocabulary: the first, with its file and offset" \
	"token file $tmp/high.bin: token 256 at byte offset 1000 (token 500) is not below the model's vocabulary of 256" \
	"$tmp/h4/launch" --steps 1 --data "$tmp/high.bin"
refused "u16 tokens read as u32: outside the vocabulary" \
	"token file $tmp/corpus.bin: token " "$tmp/h4/launch" --steps 1 --data "$tmp/corpus.bin" --data-format u32
refused "an empty file" "token file $tmp/empty.bin: empty" "$tmp/h4/launch" --steps 1 --data "$tmp/empty.bin"
refused "a directory" "token file $tmp/dir.bin: not a regular file (a directory)" \
	"$tmp/h4/launch" --steps 1 --data "$tmp/dir.bin"
refused "/dev/null" "token file /dev/null: not a regular file (a character device)" \
	"$tmp/h4/launch" --steps 1 --data /dev/null --data-format u16
refused "a FIFO: refused, not waited on" "token file $tmp/fifo.bin: not a regular file (a pipe)" \
	"$tmp/h4/launch" --steps 1 --data "$tmp/fifo.bin"
refused "fewer tokens than one sequence" \
	"token file $tmp/short.bin: 50 tokens, fewer than one sequence (seq + 1 = 65 tokens)" \
	"$tmp/h4/launch" --steps 1 --data "$tmp/short.bin"
refused "shards of two formats" "file $corpus is read as text, $tmp/s1.bin as u16" \
	"$tmp/h4/launch" --steps 1 --data "$tmp/s1.bin,$corpus"
refused "a bad --data-format" "--data-format is auto, text, u16 or u32, not 'u8'" \
	"$tmp/h4/launch" --steps 1 --data-format u8
# Ranks started by hand with different data (the launch script gives all
# the same): refused at start, naming both.
refused "ranks of one job on different token files" \
	"rank 1 and rank 0 train on different data (u16 tokens of hash" \
	"${MPIRUN[@]}" -np 1 "$tmp/h4/rank0" --steps 1 --data "$tmp/s1.bin" : \
	-np 1 "$tmp/h4/rank1" --steps 1 --data "$tmp/s2.bin" : -np 1 "$tmp/h4/rank2" --steps 1 --data "$tmp/s1.bin" : \
	-np 1 "$tmp/h4/rank3" --steps 1 --data "$tmp/s1.bin"
refused "ranks of one job resuming by different rules" \
	"rank 1 and rank 0 resume by different rules (--data-position not given on rank 1, reset on rank 0)" \
	"${MPIRUN[@]}" -np 1 "$tmp/h4/rank0" --steps 1 --resume "$tmp/ck" --data-position reset : \
	-np 1 "$tmp/h4/rank1" --steps 1 --resume "$tmp/ck" : -np 1 "$tmp/h4/rank2" --steps 1 --resume "$tmp/ck" \
	--data-position reset : -np 1 "$tmp/h4/rank3" --steps 1 --resume "$tmp/ck" --data-position reset
refused "tokenize: an empty input" "octopipe tokenize: error: $tmp/empty.bin: empty: a token file needs at least one token" \
	"$octopipe" tokenize "$tmp/empty.bin" -o "$tmp/x.bin"
[ ! -e "$tmp/x.bin" ] && [ ! -e "$tmp/x.bin.tmp" ] && ok "tokenize: a failure leaves no file" || bad "tokenize left a file"
refused "tokenize: a directory" "octopipe tokenize: error: $tmp/dir.bin: a directory, not a text file" \
	"$octopipe" tokenize "$tmp/dir.bin" -o "$tmp/x.bin"
# (Its files held to 64 MiB: were /dev/zero read, it would fail there
# rather than fill the disk.)
refused "tokenize: a device that never ends: refused, not read" \
	"octopipe tokenize: error: /dev/zero: a character device, not a text file" \
	bash -c 'ulimit -f 131072 && exec "$@"' sh "$octopipe" tokenize /dev/zero -o "$tmp/x.bin"
[ ! -e "$tmp/x.bin.tmp" ] || bad "tokenize of /dev/zero left $tmp/x.bin.tmp"
# An output that is a FIFO (as /dev/null is a device) is written through,
# never replaced by a regular file.
mkfifo "$tmp/out.fifo"
timeout 60 cat "$tmp/out.fifo" >"$tmp/out.read" &
reader=$!
timeout 60 "$octopipe" tokenize "$corpus" -o "$tmp/out.fifo" >/dev/null 2>&1
rc=$?
wait $reader
if [ $rc = 0 ] && [ -p "$tmp/out.fifo" ] && [ ! -e "$tmp/out.fifo.tmp" ] &&
	[ "$(stat -c %s "$tmp/out.read")" = $((2 * $(stat -c %s "$corpus"))) ]; then
	ok "tokenize into a FIFO: written through, the FIFO kept"
else
	bad "tokenize into a FIFO: exit $rc, $(stat -c %F "$tmp/out.fifo" 2>&1), $(stat -c %s "$tmp/out.read") bytes read"
fi
# A stale OUT.tmp is replaced, not opened: a FIFO there is not waited on,
# a link there does not send the tokens elsewhere.
mkfifo "$tmp/stale.bin.tmp"
echo keep >"$tmp/victim"
ln -s "$tmp/victim" "$tmp/stale2.bin.tmp"
if timeout 60 "$octopipe" tokenize "$corpus" -o "$tmp/stale.bin" >/dev/null 2>&1 &&
	timeout 60 "$octopipe" tokenize "$corpus" -o "$tmp/stale2.bin" >/dev/null 2>&1 &&
	[ -f "$tmp/stale.bin" ] && [ ! -L "$tmp/stale2.bin" ] && [ "$(cat "$tmp/victim")" = keep ] &&
	[ ! -e "$tmp/stale.bin.tmp" ] && [ ! -e "$tmp/stale2.bin.tmp" ]; then
	ok "tokenize: a stale OUT.tmp (a FIFO, a link) replaced, not opened"
else
	bad "tokenize: a stale OUT.tmp was opened (hung, or wrote through a link)"
fi
refused "tokenize: a bad --format" "--format is u16 or u32, not 'u8'" \
	"$octopipe" tokenize "$corpus" -o "$tmp/x.bin" --format u8
refused "tokenize: no -o" "no output file: give -o OUT.bin" "$octopipe" tokenize "$corpus"

echo "$pass passed, $fail failed (first loss on the text: $first)"
[ $fail = 0 ]
