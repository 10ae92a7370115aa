/* octopipe.c: the command-line driver.
 *
 *   octopipe plan MODEL.yaml      plan and print the plan
 *   octopipe compile MODEL.yaml   per-rank executables (codegen/, docs/codegen.md)
 *   octopipe opt FILE.opir        run passes on IR text, print IR text
 *   octopipe verify FILE.opir     check IR text against the invariants
 *   octopipe sim FILE             simulate a plan, print its timing
 *   octopipe profile MODEL.yaml   measure layer and link times on the target
 *   octopipe report DIR           a compiled plan's prediction against its run
 *   octopipe import FILE.csv      a torch.distributed.pipelining schedule as a plan
 *   octopipe import CONFIG.json   a Hugging Face config.json as a model file
 *   octopipe tokenize IN -o OUT   a token file from text (tokenize.c, docs/data.md)
 *
 * Options come from one table; each subcommand accepts the ones whose mask
 * names it, so --help and the parser cannot disagree.  Exit status: 0 ok,
 * 1 user error (with a diagnostic), 2 a feature not built yet. */
#include "cg.h"
#include "frontend.h"
#include "hf_import.h"
#include "ir.h"
#include "pass.h"
#include "print.h"
#include "report.h"
#include "scaleout.h"
#include "simulate.h"
#include "torch_csv.h"
#include "tokenize.h"
#include "tune.h"
#include "viz.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { C_PLAN = 1, C_COMPILE = 2, C_OPT = 4, C_VERIFY = 8, C_SIM = 16, C_PROFILE = 32, C_REPORT = 64,
       C_IMPORT = 128 };
#define C_MODEL (C_PLAN | C_COMPILE | C_SIM)
#define C_PASSES (C_PLAN | C_COMPILE | C_OPT)

/* X(enum, flag, value name or NULL, subcommand mask, help) */
#define OPTIONS(X)                                                                      \
	X(HELP, "--help", NULL, ~0, "show this help")                                       \
	X(DEVICES, "--devices", "N", C_MODEL, "number of devices (overrides the cluster's)") \
	X(DTYPE, "--dtype", "f32|bf16|f16", C_MODEL | C_PROFILE | C_IMPORT, "the model's dtype (overrides model.dtype): what the device stores activations and parameters in (CPU ranks train in f32)") \
	X(MICROBATCHES, "--microbatches", "M", C_MODEL, "micro-batches per step")            \
	X(CLUSTER, "--cluster", "NAME|FILE", C_MODEL | C_IMPORT, "cluster preset or cluster file")      \
	X(SCHEDULE, "--schedule", "NAME", C_MODEL, "schedule: tuned (default), gpipe, 1f1b, i1f1b, zbh1, zbh2, zbv") \
	X(CHUNKS, "--chunks", "V", C_MODEL, "stages per device (interleaved schedules)")     \
	X(PARTITION, "--partition", "NAME", C_MODEL | C_IMPORT, "partition: uniform or balanced")       \
	X(BACKEND, "--backend", "nccl|mpi", C_MODEL | C_IMPORT, "transport semantics to lower for and prove (default nccl)") \
	X(DP, "--dp", "D|auto", C_MODEL, "data parallelism: the devices are D replicas of a pipeline of devices / D, each running microbatches / D of the step's micro-batches (docs/dataparallel.md); auto (plan's and sim's default; compile's is 1): every D that divides both, with the distributed optimizer off and on and the recomputation searched too, the fastest that fits kept") \
	X(RANK_ORDER, "--rank-order", "auto|pp-inner|dp-inner", C_MODEL, "with --dp: number a pipeline's devices next to each other (pp-inner) or a DP group's (dp-inner); auto, the default: the one whose step simulates faster") \
	X(DIST_OPT, "--distributed-optimizer", "on|off|auto", C_MODEL, "with --dp: shard the optimizer state over the replicas (reduce-scatter, update of a shard, all-gather); auto, the default with --dp auto: off and on both planned, the faster that fits kept") \
	X(NO_OVERLAP_PG, "--no-overlap-param-gather", NULL, C_MODEL, "with --distributed-optimizer: wait for each all-gather at the end of its step instead of before its stage's first forward of the next step") \
	X(DETERMINISTIC, "--deterministic", NULL, C_MODEL, "exact gradient sums: the same losses and weights, bit for bit, for every --dp") \
	X(BUCKET, "--bucket", "BYTES", C_MODEL, "with --dp: bytes of gradient per collective (default 32MiB; whole layers)") \
	X(RECOMPUTE, "--recompute", "none|selective|full|auto", C_MODEL | C_IMPORT, "activation recomputation of every stage: full keeps only each stage's input from F to B and runs F again before B; selective drops the Mamba scans' chunk states and runs the scans' F again in B (docs/cost-model.md, \"Recomputation\"); auto, the default with --dp auto: the fastest that fits, searched with D") \
	X(PROFILE, "--profile", "FILE", C_MODEL | C_IMPORT, "measured F/B/W times that replace the analytic costs (docs/profile.md)") \
	X(TUNE_BUDGET, "--tune-budget", "SECONDS", C_MODEL | C_OPT, "bound the whole planning in wall time (default 20): the search stops where it got, and the plan says so") \
	X(TUNE_EFFORT, "--tune-effort", "N", C_MODEL | C_OPT, "bound the tuner's search in plans judged (default 20000): the same plan on any machine unless --tune-budget comes first") \
	X(PASSES, "--passes", "a,b,c", C_PASSES, "run these passes instead of the default pipeline") \
	X(PRINT_BEFORE, "--print-ir-before", "PASS", C_PASSES, "print the IR before PASS")   \
	X(PRINT_AFTER, "--print-ir-after", "PASS", C_PASSES, "print the IR after PASS")      \
	X(PRINT_ALL, "--print-ir-after-all", NULL, C_PASSES, "print the IR after every pass") \
	X(PRINT_PIPELINE, "--print-pipeline", NULL, C_PASSES, "print the pass pipeline and exit") \
	X(VERIFY_EACH, "--verify-each", NULL, C_PASSES, "verify the IR after every pass")    \
	X(JSON, "--json", NULL, C_PLAN | C_SIM | C_IMPORT, "print one JSON object instead of the table") \
	X(TRACE, "--trace", "FILE.json", C_PLAN | C_SIM | C_IMPORT, "write the simulated step as a Chrome trace (Perfetto)") \
	X(SVG, "--svg", "FILE.svg", C_PLAN | C_SIM | C_IMPORT, "draw the simulated step as an SVG timeline") \
	X(TARGET, "--target", "cpu|cuda|cuda-emu", C_COMPILE | C_PROFILE, "what the executables run on: cpu (MPI ranks; the default), cuda (the layers on GPUs: NVRTC kernels, cuBLAS, NCCL; docs/cuda.md) or cuda-emu (the cuda ranks with their kernels compiled for the host and run by an emulator: the device path without a GPU, for testing)") \
	X(GPU_ARCH, "--gpu-arch", "sm_XX", C_COMPILE | C_PROFILE, "cuda: the GPU architecture NVRTC compiles for (default sm_90)") \
	X(EMIT, "--emit", "llvm,obj|cuda,ptx", C_COMPILE, "also write each rank's LLVM module (DIR/rankN.ll) or keep its object (DIR/rankN.o); cuda: write the kernels' CUDA source (DIR/*.cu) or PTX (DIR/*.ptx)") \
	X(EXPORT_SCHEDULE, "--export-schedule", "torch-csv[-comms] FILE", C_PLAN, "also write the plan's per-rank order as torch.distributed.pipelining's schedule CSV (compute actions; -comms: with SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD) to FILE (docs/interop.md)") \
	X(MODEL, "--model", "MODEL.yaml", C_IMPORT, "the model the schedule runs (its layers, shape and cluster)") \
	X(LAYERS_PER_STAGE, "--layers-per-stage", "N,N,...", C_IMPORT, "the layers of each stage of the schedule, in order (default: the model's partition, cut into the file's stages)") \
	X(IGNORE, "--ignore", "KEY,...", C_IMPORT, "config.json: import without these keys, knowingly: one that only shapes training is read as absent, a refused one's part the format cannot say is left out (docs/import.md)") \
	X(OUTPUT, "-o", "FILE", C_PLAN | C_OPT | C_COMPILE | C_PROFILE | C_IMPORT, "write the IR (plan, opt, import of a schedule; '-' for stdout), the model file (import of a config.json; default stdout), the executables (compile: a directory) or the profile (profile) there")

typedef enum opt_id {
#define X(e, f, v, m, h) O_##e,
	OPTIONS(X)
#undef X
	O_COUNT
} opt_id;

typedef struct opt_info {
	const char *flag, *value;
	unsigned mask;
	const char *help;
} opt_info;

static const opt_info opts[O_COUNT] = {
#define X(e, f, v, m, h) {f, v, (unsigned)(m), h},
	OPTIONS(X)
#undef X
};

typedef struct command {
	const char *name;
	unsigned bit;
	const char *args, *synopsis;
} command;

static const command commands[] = {
	{"plan", C_PLAN, "MODEL.yaml", "partition, place and schedule a model; print the plan"},
	{"compile", C_COMPILE, "MODEL.yaml -o DIR", "compile a model (or a plan, FILE.opir) to per-rank executables that train it"},
	{"opt", C_OPT, "FILE.opir", "run passes on IR text and print the resulting IR"},
	{"verify", C_VERIFY, "FILE.opir", "check IR text against the IR invariants; prove lowered programs deadlock-free"},
	{"sim", C_SIM, "FILE.opir|MODEL.yaml", "simulate a plan: makespan, bubbles, memory, tokens/s"},
	{"profile", C_PROFILE, "MODEL.yaml -o FILE", "measure every layer's F, B, W and the link between two ranks on the target; write a profile (docs/profile.md)"},
	{"report", C_REPORT, "DIR", "a compiled plan's simulated step against the traces of its run (docs/report.md)"},
	{"import", C_IMPORT, "FILE.csv|CONFIG.json", "FILE.csv with --model MODEL.yaml: read a torch.distributed.pipelining schedule CSV as a plan of the model (stages, placement, order; one pipeline; --recompute none, full or selective, not auto); lower, prove and simulate it (docs/interop.md). CONFIG.json: write the model file (YAML) of a Hugging Face config.json (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, deepseek_v2, deepseek_v3, jamba, nemotron_h; docs/import.md)"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof *commands)

typedef struct args {
	const command *cmd;
	const char *input;
	const char *val[O_COUNT];
	bool set[O_COUNT];
	int argi[O_COUNT]; /* where in argv each option was written */
	int argc;
	char **argv;
	const char *export_file; /* --export-schedule's second value */
} args;

/* The command line as a source, so that an error about a flag is printed
 * by diag_error like any other: "<command line>:1:COL: error: ...", the
 * line, and a caret under the flag. */
static arena *cmdline_arena;

static void free_cmdline(void)
{
	arena_free(cmdline_arena);
}

static ir_loc flag_loc(const args *a, opt_id id)
{
	static const src_file *src;
	if (!a->set[id] || !a->argv)
		return (ir_loc){0};
	if (!src) {
		cmdline_arena = arena_new();
		atexit(free_cmdline);
		char *text = arena_strdup(cmdline_arena, "octopipe");
		for (int i = 1; i < a->argc; i++)
			text = arena_printf(cmdline_arena, "%s %s", text, a->argv[i]);
		src = src_from_string(cmdline_arena, "<command line>", text);
	}
	size_t col = 1 + strlen("octopipe ");
	for (int i = 1; i < a->argi[id]; i++)
		col += strlen(a->argv[i]) + 1;
	return (ir_loc){src, 1, col > 100000 ? 100000 : (int)col};
}

static void usage(FILE *out)
{
	fputs("usage: octopipe COMMAND [options] INPUT\n\n"
	      "OctoPipe compiles a YAML model description into a pipeline-parallel\n"
	      "training plan (partition, placement, schedule, communication, proven\n"
	      "deadlock-free) and per-rank executables that train it.\n\ncommands:\n", out);
	for (int i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-8s %-22s %s\n", commands[i].name, commands[i].args,
		        commands[i].synopsis);
	fprintf(out, "  %-8s %-22s %s\n", "tokenize", "IN.txt -o OUT.bin",
	        "a token file (u16 or u32) from text, a token per byte (docs/data.md)");
	fputs("\n'octopipe COMMAND --help' (or -h) lists the options of a command;\n"
	      "'octopipe --version' prints the version.\n"
	      "Exit status: 0 success, 1 an error in the input, 2 a feature not built yet.\n", out);
}

static void command_help(const command *c)
{
	printf("usage: octopipe %s [options] %s\n\n%s\n\noptions:\n", c->name, c->args, c->synopsis);
	for (int i = 0; i < O_COUNT; i++) {
		if (!(opts[i].mask & c->bit))
			continue;
		char lhs[48];
		snprintf(lhs, sizeof lhs, "%s%s%s", opts[i].flag, opts[i].value ? " " : "",
		         opts[i].value ? opts[i].value : "");
		printf("  %-26s %s\n", lhs, opts[i].help);
	}
	if (c->bit & C_PASSES) {
		printf("\npasses (default pipeline:");
		for (int i = 0; i < pass_default_pipeline_len; i++)
			printf(" %s", pass_names[pass_default_pipeline[i]]);
		printf("):\n");
		for (int i = 0; i < PASS_COUNT; i++)
			printf("  %-12s %s\n", pass_table[i].name, pass_table[i].synopsis);
	}
}

/* An error about the command line with no flag to point at: through the
 * one printer, unlocated ("octopipe COMMAND: error: ...", diag_program
 * names the command once it is known).  Returns the exit status. */
static int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int cli_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_verror((ir_loc){0}, fmt, ap);
	va_end(ap);
	return 1;
}

/* Returns 0 to go on, 1 on error, -1 when --help was handled. */
static int parse_args(int argc, char **argv, args *a)
{
	const char *name = argv[1];
	for (int i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			a->cmd = &commands[i];
	if (!a->cmd) {
		const char *names[NCOMMANDS];
		for (int i = 0; i < NCOMMANDS; i++)
			names[i] = commands[i].name;
		const char *near = diag_nearest(name, names, NCOMMANDS);
		if (near)
			return cli_error("unknown command '%s'; did you mean '%s'?", name, near);
		return cli_error("unknown command '%s' (see 'octopipe --help')", name);
	}
	static char program[64];
	snprintf(program, sizeof program, "octopipe %s", a->cmd->name);
	diag_program = program;
	for (int i = 2; i < argc; i++) {
		const char *arg = argv[i];
		if (arg[0] != '-' || strcmp(arg, "-") == 0) {
			if (a->input)
				return cli_error("more than one input file ('%s' and '%s')",
				                 a->input, arg);
			a->input = arg;
			continue;
		}
		if (strcmp(arg, "-h") == 0) /* as at the top level */
			arg = "--help";
		const char *eq = strchr(arg, '=');
		size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
		int id = -1;
		for (int o = 0; o < O_COUNT; o++)
			if (strlen(opts[o].flag) == flen && strncmp(opts[o].flag, arg, flen) == 0)
				id = o;
		if (id < 0 || !(opts[id].mask & a->cmd->bit)) {
			const char *cands[O_COUNT];
			int n = 0;
			for (int o = 0; o < O_COUNT; o++)
				if (opts[o].mask & a->cmd->bit)
					cands[n++] = opts[o].flag;
			char *flag = strndup(arg, flen);
			const char *near = diag_nearest(flag, cands, n);
			int rc = near ? cli_error("unknown option '%s'; did you mean '%s'?", flag, near)
			              : cli_error("unknown option '%s' (see 'octopipe %s --help')",
			                          flag, a->cmd->name);
			free(flag);
			return rc;
		}
		if (id == O_HELP) {
			command_help(a->cmd);
			return -1;
		}
		if (a->set[id])
			return cli_error("option '%s' given twice", opts[id].flag);
		a->set[id] = true;
		a->argi[id] = i;
		if (!opts[id].value) {
			if (eq)
				return cli_error("option '%s' takes no value", opts[id].flag);
			continue;
		}
		if (eq) {
			a->val[id] = eq + 1;
		} else if (i + 1 < argc) {
			a->val[id] = argv[++i];
		} else {
			return cli_error("option '%s' needs a value (%s)", opts[id].flag,
			                 opts[id].value);
		}
		if (!*a->val[id])
			return cli_error("option '%s' has an empty value", opts[id].flag);
		if (id == O_EXPORT_SCHEDULE) {
			if (i + 1 >= argc || !*argv[i + 1])
				return cli_error("option '%s' needs a format and a file (%s)", opts[id].flag,
				                 opts[id].value);
			a->export_file = argv[++i];
		}
	}
	if (!a->input && !a->set[O_PRINT_PIPELINE] && !(a->set[O_PROFILE] && (a->cmd->bit & C_MODEL)))
		return cli_error("no input file (usage: octopipe %s %s)", a->cmd->name,
		                 a->cmd->args);
	return 0;
}

/* The one reader of numeric flags: plain digits (and, for a real number,
 * a fraction and an exponent) from the first character to the last -- no
 * blank, sign, hex or "inf" that strtod would also take -- in lo..hi
 * (a real number: above lo). */
static bool flag_number(const char *s, bool integer, double lo, double hi, double *out)
{
	size_t n = strspn(s, integer ? "0123456789" : "0123456789.eE+-");
	if (!*s || s[n] || !(*s >= '0' && *s <= '9'))
		return false;
	char *end;
	errno = 0;
	double v = integer ? (double)strtoll(s, &end, 10) : strtod(s, &end);
	if (*end || errno || !isfinite(v) || (integer ? v < lo : !(v > lo)) || v > hi)
		return false;
	*out = v;
	return true;
}

static int parse_count(const args *a, opt_id id, int64_t max, int64_t *out)
{
	double v;
	if (!flag_number(a->val[id], true, 1, (double)max, &v))
		return cli_error("%s must be an integer in 1..%lld, got '%s'",
		                 opts[id].flag, (long long)max, a->val[id]);
	*out = (int64_t)v;
	return 0;
}

/* A size: the IR's byte counts ("4MiB", "65536B") or a plain count of
 * bytes, from 1 byte to 1 PiB. */
static int parse_size(const args *a, opt_id id, uint64_t *out)
{
	double v;
	const char *s = a->val[id];
	if (flag_number(s, true, 1, 0x1p50, &v)) {
		*out = (uint64_t)v;
		return 0;
	}
	if (strcmp(s, "unlimited") != 0 && ir_parse_bytes(s, out) && *out >= 1 && *out <= (1ull << 50))
		return 0;
	return cli_error("%s must be a size such as 4MiB or 65536 (1 byte .. 1 PiB), got '%s'",
	                 opts[id].flag, s);
}

static int parse_seconds(const args *a, opt_id id, double max, double *out)
{
	if (!flag_number(a->val[id], false, 0, max, out))
		return cli_error("%s must be a number of seconds in (0, %g], got '%s'",
		                 opts[id].flag, max, a->val[id]);
	return 0;
}

typedef struct pipeline {
	pass_id ids[64];
	int n;
	bool custom; /* --passes: not the default pipeline */
	pass_opts po;
} pipeline;

/* The tuner's budget for this run's plan (--tune-budget). */
static tune_budget budget;

static int setup_pipeline(const args *a, pipeline *pl)
{
	memset(pl, 0, sizeof *pl);
	if (a->set[O_PASSES]) {
		pl->n = pass_parse_list(a->val[O_PASSES], pl->ids, 64, flag_loc(a, O_PASSES));
		if (pl->n < 0)
			return 1;
		pl->custom = true;
	} else {
		pl->n = pass_default_pipeline_len;
		memcpy(pl->ids, pass_default_pipeline, (size_t)pl->n * sizeof *pl->ids);
	}
	pl->po.budget = &budget;
	pl->po.verify_each = a->set[O_VERIFY_EACH];
	pl->po.print_after_all = a->set[O_PRINT_ALL];
	static const opt_id which[] = {O_PRINT_BEFORE, O_PRINT_AFTER};
	for (int w = 0; w < 2; w++) {
		if (!a->set[which[w]])
			continue;
		int id = pass_lookup(a->val[which[w]]);
		if (id < 0) {
			const char *near = diag_nearest(a->val[which[w]], pass_names, PASS_COUNT);
			return near ? cli_error("unknown pass '%s' in %s; did you mean '%s'?",
			                        a->val[which[w]], opts[which[w]].flag, near)
			            : cli_error("unknown pass '%s' in %s", a->val[which[w]],
			                        opts[which[w]].flag);
		}
		(w ? pl->po.print_after : pl->po.print_before)[id] = true;
	}
	if (a->set[O_PRINT_PIPELINE]) {
		for (int i = 0; i < pl->n; i++)
			printf("%s%s", i ? "," : "", pass_names[pl->ids[i]]);
		printf("\n");
		return -1;
	}
	return 0;
}

static ir_module *load_model(const args *a)
{
	fe_overrides ov = {0};
	if (a->set[O_DEVICES] && parse_count(a, O_DEVICES, 65536, &ov.devices))
		return NULL;
	if (a->set[O_MICROBATCHES] && parse_count(a, O_MICROBATCHES, 1 << 20, &ov.microbatches))
		return NULL;
	if (a->set[O_CHUNKS] && parse_count(a, O_CHUNKS, 1024, &ov.chunks))
		return NULL;
	if (a->set[O_DP]) {
		double v;
		if (strcmp(a->val[O_DP], "auto") == 0)
			ov.dp_auto = true;
		else if (flag_number(a->val[O_DP], true, 1, 65536, &v))
			ov.dp = (int64_t)v;
		else {
			cli_error("--dp must be auto or an integer in 1..65536, got '%s'", a->val[O_DP]);
			return NULL;
		}
	}
	if (a->set[O_BUCKET] && parse_size(a, O_BUCKET, &ov.bucket))
		return NULL;
	/* Errors about the data-parallel options point at --dp, or at the
	 * first of the others given without it. */
	static const opt_id dp_flags[] = {O_DP, O_RANK_ORDER, O_DIST_OPT, O_BUCKET};
	for (size_t k = 0; k < sizeof dp_flags / sizeof *dp_flags; k++)
		if (a->set[dp_flags[k]]) {
			ov.dp_at = flag_loc(a, dp_flags[k]);
			break;
		}
	/* plan and sim answer "how fast on these devices": the degree is the
	 * search's unless given; compile builds the one given (1 unless
	 * --dp or the model says), since its numbers depend on it. */
	ov.dp_default_auto = a->cmd->bit != C_COMPILE;
	ov.rank_order = a->val[O_RANK_ORDER];
	if (a->set[O_DIST_OPT]) {
		static const char *const modes[] = {"on", "off", "auto"};
		for (int i = 0; i < 3; i++)
			if (strcmp(a->val[O_DIST_OPT], modes[i]) == 0)
				ov.dist_opt = FE_ON + i;
		if (!ov.dist_opt) {
			cli_error("--distributed-optimizer must be on, off or auto, got '%s'",
			          a->val[O_DIST_OPT]);
			return NULL;
		}
	}
	ov.no_overlap_gather = a->set[O_NO_OVERLAP_PG];
	ov.no_overlap_at = flag_loc(a, O_NO_OVERLAP_PG);
	ov.deterministic = a->set[O_DETERMINISTIC];
	ov.recompute = a->val[O_RECOMPUTE];
	ov.recompute_at = flag_loc(a, O_RECOMPUTE);
	ov.devices_at = flag_loc(a, O_DEVICES);
	ov.microbatches_at = flag_loc(a, O_MICROBATCHES);
	ov.chunks_at = flag_loc(a, O_CHUNKS);
	ov.cluster_at = flag_loc(a, O_CLUSTER);
	ov.dtype_at = flag_loc(a, O_DTYPE);
	ov.partition = a->val[O_PARTITION];
	ov.backend = a->val[O_BACKEND];
	ov.cluster = a->val[O_CLUSTER];
	ov.schedule = a->val[O_SCHEDULE];
	ov.dtype = a->val[O_DTYPE];
	if (!a->input) {
		/* A published profile (JSON) brings its own layer sequence. */
		ir_module *m = fe_load_profile_model(a->val[O_PROFILE], &ov);
		if (m && ir_verify(m) != 0) {
			ir_free(m);
			return NULL;
		}
		return m;
	}
	size_t pl = a->set[O_PROFILE] ? strlen(a->val[O_PROFILE]) : 0;
	if (pl > 5 && strcmp(a->val[O_PROFILE] + pl - 5, ".json") == 0) {
		cli_error("a published profile (.json) brings its own layers: give it "
		          "without %s, or write a YAML profile (docs/profile.md)", a->input);
		return NULL;
	}
	ir_module *m = fe_load(a->input, &ov);
	if (m && a->set[O_PROFILE] && fe_load_profile(m, a->val[O_PROFILE]) != 0) {
		ir_free(m);
		return NULL;
	}
	if (m && ir_verify(m) != 0) {
		ir_free(m);
		return NULL;
	}
	return m;
}

static ir_module *load_ir(const args *a, arena *ar)
{
	src_file *src = src_read(ar, a->input);
	if (!src)
		return NULL;
	ir_module *m = ir_parse(src);
	if (m && ir_verify(m) != 0) {
		ir_free(m);
		return NULL;
	}
	return m;
}

static int write_ir(const args *a, const ir_module *m)
{
	if (!a->set[O_OUTPUT] || strcmp(a->val[O_OUTPUT], "-") == 0) {
		ir_print(stdout, m);
		return 0;
	}
	FILE *f = fopen(a->val[O_OUTPUT], "w");
	if (!f)
		return cli_error("cannot write '%s': %s", a->val[O_OUTPUT], strerror(errno));
	ir_print(f, m);
	if (fclose(f) != 0)
		return cli_error("cannot write '%s': %s", a->val[O_OUTPUT], strerror(errno));
	return 0;
}

/* ---- planning ---------------------------------------------------------- */

/* The tail the planning commands share: the passes -- for an IR file
 * that `compile` finishes (`finish`), the ones it still lacks; for a model
 * whose dp is left to the search (--dp auto), the search, which plans
 * every candidate and replaces *mp by the one it keeps (*so says how each
 * did) -- the invariants, the proof again where the programs are lowered
 * (`reprove`: codegen trusts no text), and the simulated step when the
 * module has costs and programs (*r; NULL otherwise).  Returns 0, or 1
 * after a diagnostic. */
static int run_pipeline(ir_module **mp, pipeline *pl, bool finish, bool reprove, sim_result **r,
                        scaleout *so)
{
	*r = NULL;
	memset(so, 0, sizeof *so);
	so->chosen = -1;
	if (finish)
		pl->n = pass_lacking(*mp, pl->ids);
	if ((*mp)->dp_auto || (*mp)->recompute_auto || (*mp)->dist_opt_auto) {
		if (pl->custom)
			return cli_error("--passes runs the passes given on one plan; --dp auto, "
			                 "--distributed-optimizer auto and --recompute auto plan every "
			                 "candidate with the default pipeline: give --dp D, "
			                 "--distributed-optimizer on|off and --recompute none|full");
		ir_module *x = scaleout_search(*mp, &pl->po, so);
		if (!x)
			return 1;
		so->base = *mp; /* x shares its strings: freed after x */
		*mp = x;
	} else if (pass_run(*mp, pl->ids, pl->n, &pl->po) != 0) {
		return 1;
	}
	ir_module *m = *mp;
	if (ir_verify(m) != 0)
		return 1;
	if (reprove && ir_lowered(m) && pass_run_one(m, PASS_verify, NULL) != 0)
		return 1;
	bool failed;
	*r = sim_run_ready(m, &failed);
	return failed;
}

static int write_pictures(const args *a, const ir_module *m, const sim_result *r)
{
	if (a->set[O_TRACE] && viz_trace(m, r, a->val[O_TRACE]) != 0)
		return 1;
	if (a->set[O_SVG] && viz_svg(m, r, a->val[O_SVG]) != 0)
		return 1;
	return 0;
}

/* The data-parallel search's rows when it ran (--dp auto), the plan, its
 * simulated step and, for a tuned plan, its comparison with the
 * baselines (c: NULL when there is none). */
static void print_tables(const ir_module *m, const sim_result *r, const plan_comparison *c,
                         const scaleout *so)
{
	if (so->nrows > 1)
		print_scaleout_table(m, so);
	print_plan_table(m);
	if (r)
		print_sim_table(m, r);
	if (r && c && m->plan.schedule == IR_SCHED_TUNED)
		print_comparison(m, r, c);
}

/* ---- commands ------------------------------------------------------------ */

/* --export-schedule's format: 0 compute actions, 1 with comms, -1 after
 * a message. */
static int export_format(const args *a)
{
	if (!a->set[O_EXPORT_SCHEDULE])
		return 0;
	if (strcmp(a->val[O_EXPORT_SCHEDULE], "torch-csv") == 0)
		return 0;
	if (strcmp(a->val[O_EXPORT_SCHEDULE], "torch-csv-comms") == 0)
		return 1;
	cli_error("--export-schedule writes torch-csv or torch-csv-comms, got '%s'",
	          a->val[O_EXPORT_SCHEDULE]);
	return -1;
}

static int cmd_plan(const args *a)
{
	int comms = export_format(a);
	if (comms < 0)
		return 1;
	pipeline pl;
	int rc = setup_pipeline(a, &pl);
	if (rc)
		return rc < 0 ? 0 : rc;
	ir_module *m = load_model(a);
	if (!m)
		return 1;
	if (!a->set[O_PASSES])
		pl.n = pass_pipeline_for(m, pl.ids);
	sim_result *r;
	scaleout so;
	rc = run_pipeline(&m, &pl, false, false, &r, &so);
	if (rc && so.nrows && !a->set[O_JSON])
		print_scaleout_table(m, &so); /* why no candidate plans or fits */
	if (!rc && !r && (a->set[O_TRACE] || a->set[O_SVG]))
		rc = cli_error("--trace and --svg need a simulated plan (costs and programs)");
	if (!rc) {
		bool ir_to_stdout = a->set[O_OUTPUT] && strcmp(a->val[O_OUTPUT], "-") == 0;
		if (a->set[O_JSON]) {
			print_plan_json(m, r, &so);
		} else if (!pl.po.print_after_all && !ir_to_stdout) {
			plan_comparison c;
			bool tuned = r && m->plan.schedule == IR_SCHED_TUNED;
			if (tuned)
				plan_compare(m, &budget, &c);
			print_tables(m, r, tuned ? &c : NULL, &so);
		}
		if (a->set[O_OUTPUT])
			rc = write_ir(a, m);
		if (!rc && a->set[O_EXPORT_SCHEDULE])
			rc = tcsv_export(m, comms, a->export_file);
		if (!rc && r)
			rc = write_pictures(a, m, r);
	}
	sim_free(r);
	ir_free(m);
	scaleout_free(&so);
	return rc;
}

/* import FILE.csv: a torch.distributed.pipelining schedule (tools/torch_csv.c,
 * docs/interop.md) on --model: the file's ranks are the devices and its
 * micro-batches the step's; its stages, placement and order are the plan,
 * which the lowering passes finish, prove and simulate as any other.  The
 * input's extension chooses the reader. */
static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n > k && strcmp(s + n - k, suffix) == 0;
}

/* import CONFIG.json: a Hugging Face config.json as a model file
 * (frontend/hf_import.c, docs/import.md), which the frontend reads back
 * before it is written, so that what import writes `plan` takes. */
static int cmd_import_hf(const args *a, arena *ar, const src_file *src)
{
	for (int i = 0; i < O_COUNT; i++)
		if (a->set[i] && i != O_OUTPUT && i != O_IGNORE)
			return cli_error("%s is for a torch schedule (FILE.csv); the import of a config.json "
			                 "takes -o and --ignore", opts[i].flag);
	const char **keys = NULL;
	int n = 0;
	if (a->set[O_IGNORE]) {
		char *list = arena_strdup(ar, a->val[O_IGNORE]);
		keys = arena_alloc(ar, (strlen(list) / 2 + 1) * sizeof *keys);
		for (char *w = list, *end; w; w = end) {
			end = strchr(w, ',');
			if (end)
				*end++ = 0;
			if (!*w)
				return cli_error("--ignore takes KEY,KEY,... with no empty key, got '%s'",
				                 a->val[O_IGNORE]);
			keys[n++] = w;
		}
	}
	const char *text = fe_import_hf(ar, src, keys, n, flag_loc(a, O_IGNORE));
	if (!text)
		return 1;
	bool to_stdout = !a->set[O_OUTPUT] || strcmp(a->val[O_OUTPUT], "-") == 0;
	ir_module *m = fe_load_src(src_from_string(ar, to_stdout ? "<imported model>" : a->val[O_OUTPUT],
	                                           text), NULL);
	if (!m) {
		diag_note((ir_loc){src, 1, 1}, "the model file above was made from this config.json");
		return 1;
	}
	ir_free(m);
	if (to_stdout) {
		fputs(text, stdout);
		return 0;
	}
	FILE *f = fopen(a->val[O_OUTPUT], "w");
	if (!f)
		return cli_error("cannot write '%s': %s", a->val[O_OUTPUT], strerror(errno));
	fputs(text, f);
	if (fclose(f) != 0)
		return cli_error("cannot write '%s': %s", a->val[O_OUTPUT], strerror(errno));
	return 0;
}

/* import: the file chooses the reader -- a .csv is a torch schedule, a
 * .json or a file that names a "model_type" a Hugging Face config. */
static int cmd_import(const args *a)
{
	if (!ends_with(a->input, ".csv")) {
		arena *ar = arena_new();
		const src_file *src = src_read(ar, a->input);
		int rc = 1;
		if (src && (ends_with(a->input, ".json") || fe_looks_like_hf(src)))
			rc = cmd_import_hf(a, ar, src);
		else if (src)
			cli_error("import reads a torch.distributed.pipelining schedule (FILE.csv) or a "
			          "Hugging Face config.json; '%s' is neither", a->input);
		arena_free(ar);
		return rc;
	}
	if (a->set[O_IGNORE])
		return cli_error("--ignore is for a config.json; a torch schedule has no keys to ignore");
	if (!a->set[O_MODEL])
		return cli_error("import %s needs the model it schedules: --model MODEL.yaml", a->input);
	arena *ar = arena_new();
	tcsv_sched *s = tcsv_read(ar, a->input);
	ir_module *m = NULL;
	int rc = 1;
	if (s) {
		char devices[16], mbs[16];
		snprintf(devices, sizeof devices, "%d", tcsv_ranks(s));
		snprintf(mbs, sizeof mbs, "%d", tcsv_microbatches(s));
		args b = *a;
		b.input = a->val[O_MODEL];
		b.val[O_DEVICES] = devices, b.val[O_MICROBATCHES] = mbs, b.val[O_DP] = "1";
		b.set[O_DEVICES] = b.set[O_MICROBATCHES] = b.set[O_DP] = true;
		m = load_model(&b);
		if (m && (m->recompute_auto || m->dp_auto || m->dist_opt_auto)) {
			cli_error("import plans the file's schedule only: give --recompute none, full or "
			          "selective, not a search (auto)");
			ir_free(m);
			m = NULL;
		}
	}
	sim_result *r = NULL;
	scaleout so = {0};
	if (m && pass_run_one(m, PASS_cost, NULL) == 0 &&
	    tcsv_build(m, s, a->val[O_LAYERS_PER_STAGE], flag_loc(a, O_LAYERS_PER_STAGE)) == 0) {
		pipeline pl = {.n = pass_lower_passes.n, .po.budget = &budget};
		memcpy(pl.ids, pass_lower_passes.ids, (size_t)pl.n * sizeof *pl.ids);
		rc = run_pipeline(&m, &pl, false, false, &r, &so);
	}
	if (!rc) {
		bool ir_to_stdout = a->set[O_OUTPUT] && strcmp(a->val[O_OUTPUT], "-") == 0;
		if (a->set[O_JSON])
			print_plan_json(m, r, &so);
		else if (!ir_to_stdout)
			print_tables(m, r, NULL, &so);
		if (a->set[O_OUTPUT])
			rc = write_ir(a, m);
		if (!rc && r)
			rc = write_pictures(a, m, r);
	}
	sim_free(r);
	ir_free(m);
	scaleout_free(&so);
	arena_free(ar);
	return rc;
}

static bool is_ir_file(const char *path)
{
	size_t n = strlen(path);
	return n > 5 && strcmp(path + n - 5, ".opir") == 0;
}

/* An IR file carries its own cluster, shape, plan options and costs: the
 * options that change a model before planning would be dropped without a
 * word, so they are refused (and so is --backend where nothing lowers). */
static int model_flags_on_ir(const args *a, bool backend_too)
{
	static const opt_id model_only[] = {O_DEVICES, O_DTYPE, O_MICROBATCHES, O_CLUSTER, O_SCHEDULE,
	                                    O_CHUNKS, O_PARTITION, O_PROFILE, O_DP, O_RANK_ORDER,
	                                    O_DIST_OPT, O_NO_OVERLAP_PG, O_DETERMINISTIC, O_BUCKET,
	                                    O_BACKEND};
	for (size_t i = 0; i < sizeof model_only / sizeof *model_only; i++) {
		opt_id id = model_only[i];
		if (a->set[id] && (id != O_BACKEND || backend_too))
			return cli_error("%s applies to a model, not to IR text: %s carries its "
			                 "own (edit the 'model', 'train', 'cluster' and 'plan' lines, "
			                 "or give the model)", opts[id].flag, a->input);
	}
	return 0;
}

/* sim: an IR file as it is (with the cost pass first when costs are
 * missing), or a model through the default pipeline. */
static int cmd_sim(const args *a)
{
	arena *ar = arena_new();
	ir_module *m;
	pipeline pl = {0};
	if (a->input && is_ir_file(a->input)) {
		if (model_flags_on_ir(a, true) ||
		    (a->set[O_TUNE_BUDGET] &&
		     cli_error("--tune-budget is for a model: sim runs no tuner on IR text (%s)", a->input)) ||
		    (a->set[O_TUNE_EFFORT] &&
		     cli_error("--tune-effort is for a model: sim runs no tuner on IR text (%s)", a->input))) {
			arena_free(ar);
			return 1;
		}
		m = load_ir(a, ar);
		if (m && !pass_costed(m))
			pl.ids[pl.n++] = PASS_cost;
	} else {
		m = load_model(a);
		if (m)
			pl.n = pass_pipeline_for(m, pl.ids);
		pl.po.budget = &budget;
	}
	if (!m) {
		arena_free(ar);
		return 1;
	}
	sim_result *r;
	scaleout so;
	int rc = run_pipeline(&m, &pl, false, false, &r, &so);
	if (rc && so.nrows && !a->set[O_JSON])
		print_scaleout_table(m, &so);
	if (!rc && !r) {
		diag_error(ir_loc_or(m->plan_loc, m->loc),
		           "sim: the plan has no device programs; run the 'schedule' pass first");
		rc = 1;
	}
	if (r) {
		if (a->set[O_JSON]) {
			print_plan_json(m, r, &so);
		} else {
			if (so.nrows > 1)
				print_scaleout_table(m, &so);
			ir_print_summary(stdout, m, pass_partition_label(m));
			print_sim_table(m, r);
		}
		rc = write_pictures(a, m, r);
	}
	sim_free(r);
	ir_free(m);
	scaleout_free(&so);
	arena_free(ar);
	return rc;
}

static int cmd_opt(const args *a)
{
	pipeline pl;
	int rc = setup_pipeline(a, &pl);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!a->set[O_PASSES])
		pl.n = 0; /* opt runs only what it is told */
	arena *ar = arena_new();
	ir_module *m = load_ir(a, ar);
	if (!m) {
		arena_free(ar);
		return 1;
	}
	rc = pass_run(m, pl.ids, pl.n, &pl.po) ? 1 : 0;
	if (!rc && ir_verify(m) != 0)
		rc = 1;
	if (!rc && !pl.po.print_after_all)
		rc = write_ir(a, m);
	ir_free(m);
	arena_free(ar);
	return rc;
}

static int cmd_verify(const args *a)
{
	arena *ar = arena_new();
	ir_module *m = load_ir(a, ar);
	int rc = 1;
	if (m) {
		/* Lowered programs get the deadlock proof; a proof already in the
		 * file must be found again. */
		if (ir_lowered(m)) {
			if (pass_run_one(m, PASS_verify, NULL) == 0) {
				printf("%s: ok: %d layers, %d stages, %d device programs; deadlock-free under %s "
				       "(%lld steps, certificate %016llx)\n",
				       a->input, m->nlayers, m->nstages, m->ndevices,
				       ir_backend_names[m->proof.backend], (long long)m->proof.steps,
				       (unsigned long long)m->proof.order);
				rc = 0;
			}
		} else {
			printf("%s: ok: %d layers, %d stages, %d device programs%s\n", a->input, m->nlayers,
			       m->nstages, m->ndevices,
			       m->ndevices ? "; not lowered: no deadlock proof (run 'comm' first)" : "");
			rc = 0;
		}
	}
	ir_free(m);
	arena_free(ar);
	return rc;
}

#ifndef OCTO_HAVE_CUDA
static int not_built(const char *what)
{
	diag_error((ir_loc){0}, "%s is not built yet in this version of octopipe; 'octopipe plan' "
	                        "shows the plan", what);
	return 2;
}
#endif

/* --target and --gpu-arch into o->target and o->arch; 0, or the exit
 * status after a message.  The one place that refuses --target cuda in a
 * build without the CUDA toolkit: before anything is planned. */
static int parse_target(const args *a, cg_options *o)
{
	const char *target = a->set[O_TARGET] ? a->val[O_TARGET] : "cpu";
	o->target = strcmp(target, "cuda") == 0       ? CG_TARGET_CUDA
	            : strcmp(target, "cuda-emu") == 0 ? CG_TARGET_CUDA_EMU
	                                              : CG_TARGET_CPU;
	if (o->target == CG_TARGET_CPU && strcmp(target, "cpu") != 0)
		return cli_error("unknown target '%s' (cpu, cuda or cuda-emu)", target);
#ifndef OCTO_HAVE_CUDA
	if (o->target == CG_TARGET_CUDA)
		return not_built("the CUDA target (--target cuda: this octopipe was built without the CUDA toolkit)");
#endif
	o->arch = a->set[O_GPU_ARCH] ? a->val[O_GPU_ARCH] : "sm_90";
	if (o->target != CG_TARGET_CUDA && a->set[O_GPU_ARCH])
		return cli_error("--gpu-arch is for --target cuda");
	if (strncmp(o->arch, "sm_", 3) != 0 || strlen(o->arch) < 5 ||
	    strspn(o->arch + 3, "0123456789") != strlen(o->arch + 3))
		return cli_error("--gpu-arch takes sm_XX (sm_80, sm_90, ...), got '%s'", o->arch);
	return 0;
}

/* compile: a model through the default pipeline (with the backend the
 * target talks through), or an IR file through the passes it still lacks
 * (run_pipeline); then the proof again, whatever ran, the comparison with
 * the baselines (made once: printed for a tuned plan, and in report.md),
 * and code generation (docs/codegen.md). */
static int cmd_compile(const args *a)
{
	cg_options co = {0};
	const char *target = a->set[O_TARGET] ? a->val[O_TARGET] : "cpu";
	int bad_target = parse_target(a, &co);
	if (bad_target)
		return bad_target;
	bool emu = co.target == CG_TARGET_CUDA_EMU, cuda = co.target != CG_TARGET_CPU;
	/* CPU ranks talk through MPI; CUDA ranks through NCCL (whose proof also
	 * covers their OCTO_COMM=mpi mode). */
	const char *backend = cuda ? "nccl" : "mpi";
	ir_backend want = cuda ? IR_BACKEND_NCCL : IR_BACKEND_MPI;
	if (a->set[O_EMIT]) {
		char *list = strdup(a->val[O_EMIT]), *save = NULL;
		int bad = 0;
		for (char *w = strtok_r(list, ",", &save); w && !bad; w = strtok_r(NULL, ",", &save)) {
			if (strcmp(w, "llvm") == 0)
				co.emit_llvm = true;
			else if (strcmp(w, "obj") == 0)
				co.emit_obj = true;
			else if (cuda && strcmp(w, "cuda") == 0)
				co.emit_cu = true;
			else if (cuda && !emu && strcmp(w, "ptx") == 0)
				co.emit_ptx = true;
			else
				bad = cli_error("--emit takes llvm, obj or both ('llvm,obj')%s, got '%s'",
				                emu ? ", and for cuda-emu: cuda" : cuda ? ", and for cuda: cuda, ptx" : "", w);
		}
		free(list);
		if (bad)
			return bad;
	}
	if (a->set[O_BACKEND] && strcmp(a->val[O_BACKEND], backend) != 0)
		return cli_error("--target %s runs its ranks over %s: --backend must be %s (or left out), "
		                 "got '%s'", target, cuda ? "NCCL" : "MPI", backend, a->val[O_BACKEND]);
	pipeline pl;
	int rc = setup_pipeline(a, &pl);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!a->set[O_OUTPUT] || strcmp(a->val[O_OUTPUT], "-") == 0)
		return cli_error("compile writes a directory of executables: give it with -o DIR");
	co.dir = a->val[O_OUTPUT];

	arena *ar = arena_new();
	ir_module *m;
	bool finish = false;
	if (a->input && is_ir_file(a->input)) {
		if (model_flags_on_ir(a, false)) {
			arena_free(ar);
			return 1;
		}
		m = load_ir(a, ar);
		if (m && ir_lowered(m) && m->plan.backend != want) {
			diag_error(ir_loc_or(m->plan_loc, m->loc), "the programs are lowered for %s, but %s "
			           "ranks talk through %s: lower them with --backend %s",
			           ir_backend_names[m->plan.backend], cuda ? "CUDA" : "CPU",
			           cuda ? "NCCL" : "MPI", backend);
			ir_free(m);
			m = NULL;
		}
		finish = !a->set[O_PASSES];
		if (m)
			m->plan.backend = want;
	} else {
		args b = *a;
		b.val[O_BACKEND] = backend;
		b.set[O_BACKEND] = true;
		m = load_model(&b);
		if (m && !a->set[O_PASSES])
			pl.n = pass_pipeline_for(m, pl.ids);
	}
	if (!m) {
		arena_free(ar);
		return 1;
	}
	sim_result *r;
	scaleout so;
	rc = run_pipeline(&m, &pl, finish, true, &r, &so);
	if (rc && so.nrows)
		print_scaleout_table(m, &so);
	plan_comparison c;
	if (!rc && r) {
		plan_compare(m, &budget, &c);
		co.baselines = c.rows;
		co.lower_bound = c.lower_bound;
	}
	if (!rc && !pl.po.print_after_all)
		print_tables(m, r, r ? &c : NULL, &so);
	if (!rc && cg_compile(m, &co) != 0)
		rc = 1;
	sim_free(r);
	ir_free(m);
	scaleout_free(&so);
	arena_free(ar);
	return rc;
}

/* profile: a profiling build (two ranks, so that the link is measured
 * too; 1f1b: any plan's programs time every layer), run once in profiling
 * mode; its programs write the profile (rt_profile). */
static int cmd_profile(const args *a)
{
	cg_options co = {.quiet = true};
	int bad_target = parse_target(a, &co);
	if (bad_target)
		return bad_target;
	bool cuda = co.target != CG_TARGET_CPU;
	if (!a->set[O_OUTPUT] || strcmp(a->val[O_OUTPUT], "-") == 0)
		return cli_error("give the profile file with -o FILE");
	if (is_ir_file(a->input))
		return cli_error("profile measures a model: give MODEL.yaml, not a plan");
	/* The scratch build goes under $TMPDIR (else /tmp), as mkdtemp users do. */
	const char *tmpdir = getenv("TMPDIR");
	if (!tmpdir || !*tmpdir)
		tmpdir = "/tmp";
	char dir[1024];
	if (strlen(tmpdir) > sizeof dir - 32 || strchr(tmpdir, '\''))
		return cli_error("TMPDIR '%.100s' is too long or holds a quote", tmpdir);
	snprintf(dir, sizeof dir, "%s/octopipe-profile-XXXXXX", tmpdir);
	if (!mkdtemp(dir))
		return cli_error("cannot make a build directory in %s: %s", tmpdir,
		                 strerror(errno));
	args b = *a;
	b.val[O_BACKEND] = cuda ? "nccl" : "mpi";
	b.val[O_DEVICES] = "2";
	b.val[O_SCHEDULE] = "1f1b";
	b.val[O_CHUNKS] = "1";
	b.val[O_DP] = "1"; /* the two ranks are one pipeline, whatever the model asks */
	b.set[O_BACKEND] = b.set[O_DEVICES] = b.set[O_SCHEDULE] = b.set[O_CHUNKS] = b.set[O_DP] = true;
	ir_module *m = load_model(&b);
	int rc = 1;
	sim_result *r = NULL;
	if (m) {
		/* No comparison: report.md of a scratch build is not read. */
		pipeline pl = {0};
		pl.n = pass_pipeline_for(m, pl.ids);
		co.dir = dir;
		scaleout so;
		rc = run_pipeline(&m, &pl, false, false, &r, &so) || cg_compile(m, &co) != 0;
	}
	if (!rc) {
		char out[4096], cmd[8192];
		if (a->val[O_OUTPUT][0] == '/' || !getcwd(out, sizeof out - 2))
			snprintf(out, sizeof out, "%s", a->val[O_OUTPUT]);
		else
			snprintf(out + strlen(out), sizeof out - strlen(out), "/%s", a->val[O_OUTPUT]);
		printf("profiling %s on 2 ranks (%s/launch --profile %s)\n", m->model.name, dir, out);
		fflush(stdout);
		snprintf(cmd, sizeof cmd, "'%s/launch' --profile '%s'", dir, out);
		if (strchr(out, '\'') || system(cmd) != 0)
			rc = cli_error("the profiling run failed (%s/launch --profile %s; it "
			               "needs mpirun)", dir, out);
		else
			printf("wrote %s\n", a->val[O_OUTPUT]);
	}
	if (!rc || !getenv("OCTO_KEEP_PROFILE_BUILD")) {
		char cmd[4200];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			diag_note((ir_loc){0}, "could not remove the build directory %s", dir);
	}
	sim_free(r);
	ir_free(m);
	return rc;
}

int main(int argc, char **argv)
{
	/* Planning allocates and frees modules of much the same size many times
	 * over: keep freed memory for the next one rather than returning it to
	 * the system and faulting it in again (ir/support.c does the same for
	 * the arenas' big chunks). */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	if (argc < 2) {
		usage(stderr);
		return 1;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("octopipe 0.1 (IR version %d)\n", IR_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "tokenize") == 0)
		return tok_main(argc - 1, argv + 1);
	args a = {.argc = argc, .argv = argv};
	int rc = parse_args(argc, argv, &a);
	if (rc)
		return rc < 0 ? 0 : rc;
	double seconds = 0;
	if (a.set[O_TUNE_BUDGET] && parse_seconds(&a, O_TUNE_BUDGET, 1e6, &seconds))
		return 1;
	budget = tune_budget_start(seconds);
	if (a.set[O_TUNE_EFFORT]) {
		double v;
		if (!flag_number(a.val[O_TUNE_EFFORT], true, 1, 1e9, &v))
			return cli_error("--tune-effort must be an integer in 1..1000000000, got '%s'",
			                 a.val[O_TUNE_EFFORT]);
		budget.effort = (long)v;
	}
	switch (a.cmd->bit) {
	case C_PLAN:
		return cmd_plan(&a);
	case C_OPT:
		return cmd_opt(&a);
	case C_VERIFY:
		return cmd_verify(&a);
	case C_COMPILE:
		return cmd_compile(&a);
	case C_SIM:
		return cmd_sim(&a);
	case C_PROFILE:
		return cmd_profile(&a);
	case C_REPORT:
		return report_run(a.input);
	case C_IMPORT:
		return cmd_import(&a);
	}
	ir_bug("unhandled command");
}
