/* viz.c: the Chrome trace and the SVG timeline of a simulated step.
 *
 * Reads the module (model name, schedule, stages, device programs) and the
 * simulator's result; writes one file and nothing else.  Every op and
 * transfer is printed once, in device and program order, straight to the
 * stream: no sorting, no per-op allocation, so the output is deterministic
 * and linear in its size.  Text from the user (the model name) is escaped
 * for its format and made valid UTF-8, since both JSON readers and XML
 * parsers reject malformed bytes. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "viz.h"

static const ir_loc no_loc; /* "octopipe: error: ..." */

/* ---- output files ------------------------------------------------------ */

static FILE *open_out(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		diag_error(no_loc, "cannot write '%s': %s", path, strerror(errno));
	errno = 0;
	return f;
}

/* A full disk shows only at the end: check the stream and the close. */
static int close_out(FILE *f, const char *path)
{
	bool bad = ferror(f) != 0;
	int e = errno;
	if (fclose(f) != 0 && !bad)
		bad = true, e = errno;
	if (!bad)
		return 0;
	diag_error(no_loc, "cannot write '%s': %s", path, strerror(e ? e : EIO));
	return -1;
}

/* ---- text ---------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (one that XML also
 * accepts), or 0 for a stray byte. */
static int utf8_len(const unsigned char *s)
{
	unsigned c = s[0], cp, min;
	int n;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, min = 0x80;
	else if ((c & 0xf0) == 0xe0)
		n = 3, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, min = 0x10000;
	else
		return 0;
	cp = c & (0x3fu >> (n - 1));
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80) /* also stops at the NUL */
			return 0;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe ||
	    cp == 0xffff)
		return 0;
	return n;
}

typedef enum { ESC_JSON, ESC_XML } esc_mode;

/* s escaped for a JSON string or XML text/attribute.  Stray bytes become
 * U+FFFD; control characters, which XML 1.0 cannot carry even as
 * references, become a space there. */
static void put_text(FILE *f, const char *s, esc_mode mode)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	while (*p) {
		int n = utf8_len(p);
		if (n == 0) {
			fputs("\xef\xbf\xbd", f);
			p++;
			continue;
		}
		if (n > 1) {
			fwrite(p, 1, (size_t)n, f);
			p += n;
			continue;
		}
		unsigned char c = *p++;
		if (mode == ESC_JSON) {
			if (c == '"' || c == '\\')
				fprintf(f, "\\%c", c);
			else if (c == '\n')
				fputs("\\n", f);
			else if (c == '\t')
				fputs("\\t", f);
			else if (c < 0x20)
				fprintf(f, "\\u%04x", c);
			else
				fputc(c, f);
		} else {
			switch (c) {
			case '&': fputs("&amp;", f); break;
			case '<': fputs("&lt;", f); break;
			case '>': fputs("&gt;", f); break;
			case '"': fputs("&quot;", f); break;
			case '\'': fputs("&apos;", f); break;
			default: fputc(c < 0x20 ? ' ' : c, f);
			}
		}
	}
}

static const char *schedule_name(const ir_module *m)
{
	unsigned s = (unsigned)m->plan.schedule;
	return s < IR_NSCHEDULES ? ir_schedule_names[s] : "?";
}

static const char *op_name(ir_op_kind k)
{
	ir_assert((unsigned)k < IR_NOPS);
	return ir_op_names[k];
}

static const ir_stage *op_stage(const ir_module *m, const ir_op *op)
{
	ir_assert(op->stage >= 0 && op->stage < m->nstages);
	return &m->stages[op->stage];
}

/* The result must come from this module: one timeline per program. */
static void check_pair(const ir_module *m, const sim_result *r)
{
	ir_assert(r->ndev == m->ndevices);
	for (int d = 0; d < r->ndev; d++)
		ir_assert(m->devices[d].nops == 0 || (r->dev[d].start && r->dev[d].end));
}

/* ---- Chrome trace ---------------------------------------------------------- */

enum { TID_COMPUTE, TID_SEND, TID_RECV, TID_COLL };

static const char *const tid_names[] = {"compute", "comm send", "comm recv", "collectives"};

/* Separates events, so the array has no trailing comma. */
static void next_event(FILE *f, bool *first)
{
	fputs(*first ? "\n" : ",\n", f);
	*first = false;
}

static void put_meta(FILE *f, bool *first, const char *what, int pid, int tid,
                     const char *name, int sort)
{
	next_event(f, first);
	if (name)
		fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
		        what, pid, tid, name);
	else
		fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
		        what, pid, tid, sort);
}

static double finite_or_zero(double v)
{
	return isfinite(v) ? v : 0;
}

/* v on the nanosecond grid the trace prints (%.3f us).  Events print
 * ts = grid(start) and dur = grid(end) - grid(start), so that one op
 * ending where the next begins stays apart after rounding: slices that
 * overlap by a nanosecond would no longer nest in Perfetto. */
static double grid(double v)
{
	return round(v * 1e3) / 1e3;
}

int viz_trace(const ir_module *m, const sim_result *r, const char *path)
{
	check_pair(m, r);
	FILE *f = open_out(path);
	if (!f)
		return -1;

	fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"model\":\"", f);
	put_text(f, m->model.name, ESC_JSON);
	fprintf(f, "\",\"schedule\":\"%s\",\"devices\":%d,\"microbatches\":%lld,"
	           "\"makespan_us\":%.3f,\"bubble_ratio\":%.6f},\n\"traceEvents\":[",
	        schedule_name(m), r->ndev, (long long)m->train.microbatches,
	        finite_or_zero(r->makespan), finite_or_zero(r->bubble_ratio));

	bool first = true;
	char name[32];
	for (int d = 0; d < r->ndev; d++) {
		snprintf(name, sizeof name, "D%d", d);
		put_meta(f, &first, "process_name", d, 0, name, 0);
		put_meta(f, &first, "process_sort_index", d, 0, NULL, d);
		for (int t = TID_COMPUTE; t <= (m->plan.dp > 1 ? TID_COLL : TID_RECV); t++) {
			put_meta(f, &first, "thread_name", d, t, tid_names[t], 0);
			put_meta(f, &first, "thread_sort_index", d, t, NULL, t);
		}
	}

	for (int d = 0; d < r->ndev; d++) {
		const ir_device *dev = &m->devices[d];
		const sim_device *sd = &r->dev[d];
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			const ir_stage *st = op_stage(m, op);
			double s = grid(sd->start[i]), e = grid(sd->end[i]);
			if (!isfinite(s) || !isfinite(e))
				continue;
			if (ir_is_tie_op(op)) {
				/* The tied sum on the collectives' thread, its wait on the
				 * compute stream. */
				bool wait = op->comm == IR_COMM_WAIT;
				if (wait && e <= s)
					continue;
				next_event(f, &first);
				fprintf(f, "{\"name\":\"%stie s%d\",\"cat\":\"tie\",\"ph\":\"X\",\"pid\":%d,"
				           "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"stage\":%d,"
				           "\"bytes\":%llu}}",
				        wait ? "wait " : "", op->stage, d, wait ? TID_COMPUTE : TID_COLL, s, e - s,
				        op->stage, (unsigned long long)op->bytes);
				continue;
			}
			if (ir_is_dp_op(op)) {
				/* Data parallelism: "all-reduce s1 b0" on the collectives'
				 * thread; its wait and the update on the compute stream. */
				bool wait = op->comm == IR_COMM_WAIT, coll = !wait && op->comm != IR_COMM_UPDATE;
				if (wait && e <= s)
					continue;
				next_event(f, &first);
				fprintf(f, "{\"name\":\"%s%s s%d b%d%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,"
				           "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"stage\":%d,\"bucket\":%d,"
				           "\"bytes\":%llu}}",
				        wait ? "wait " : "", ir_comm_names[wait ? op->coll : op->comm], op->stage, op->mb,
				        wait && op->carried ? " carried" : "", ir_comm_names[op->comm], d,
				        coll ? TID_COLL : TID_COMPUTE, s, e - s, op->stage, op->mb,
				        (unsigned long long)op->bytes);
				continue;
			}
			const char *k = op_name(op->kind);
			next_event(f, &first);
			fprintf(f, "{\"name\":\"%s s%d m%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
			           "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"stage\":%d,\"mb\":%d,\"layers\":\"L%d..L%d\"}}",
			        k, op->stage, op->mb, k, d, TID_COMPUTE, s, e - s, op->stage, op->mb,
			        st->first, st->last);
		}
	}

	for (int i = 0; i < r->nxfers; i++) {
		const sim_xfer *x = &r->xfers[i];
		double s = grid(x->start), e = grid(x->end);
		if (!isfinite(s) || !isfinite(e))
			continue;
		const char *k = op_name(x->kind);
		static const char *const fmt =
		    "{\"name\":\"%s %s s%d m%d %s D%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
		    "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"stage\":%d,\"mb\":%d,\"bytes\":%llu,\"peer\":\"D%d\"}}";
		next_event(f, &first);
		fprintf(f, fmt, "send", k, x->stage, x->mb, "->", x->dst, "send", x->src, TID_SEND, s,
		        e - s, x->stage, x->mb, (unsigned long long)x->bytes, x->dst);
		next_event(f, &first);
		fprintf(f, fmt, "recv", k, x->stage, x->mb, "<-", x->src, "recv", x->dst, TID_RECV, s,
		        e - s, x->stage, x->mb, (unsigned long long)x->bytes, x->src);
	}
	fputs("\n]}\n", f);
	return close_out(f, path);
}

/* ---- SVG timeline ------------------------------------------------------------ */

enum {
	SVG_W = 1400,    /* px */
	LEFT = 60,       /* device labels */
	RIGHT = 64,      /* utilisation column */
	TOP = 76,        /* title and legend */
	PLOT_W = SVG_W - LEFT - RIGHT,
};

/* Colour-blind-safe hues, one per op kind (Tableau 10: blue, orange,
 * green); later chunks of a device get a lighter tint of the same hue. */
static const unsigned kind_rgb[IR_NOPS] = {0x4e79a7, 0xf28e2b, 0x59a14f};
static const char *const kind_desc[IR_NOPS] = {"forward", "backward", "weight gradient"};
#define IDLE_FILL "#ebebeb"

/* c mixed with white: t = 0 keeps it, t = 1 is white. */
static unsigned tint(unsigned c, double t)
{
	unsigned out = 0;
	for (int sh = 16; sh >= 0; sh -= 8) {
		double v = (c >> sh & 0xff) + t * (255 - (c >> sh & 0xff));
		out |= (unsigned)lround(v) << sh;
	}
	return out;
}

/* Black or white, whichever contrasts more (WCAG relative luminance). */
static bool dark_text_on(unsigned c)
{
	double l = 0;
	static const double w[3] = {0.2126, 0.7152, 0.0722};
	for (int i = 0; i < 3; i++) {
		double v = (c >> (16 - 8 * i) & 0xff) / 255.0;
		v = v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4);
		l += w[i] * v;
	}
	return l > 0.2; /* a near tie (the blue, 0.18) reads better in white */
}

/* Tint of chunk c of n: the first at full colour, the last at half. */
static double chunk_tint(int c, int n)
{
	return n > 1 ? 0.5 * c / (n - 1) : 0;
}

/* A time in the unit that suits it: "850 µs", "12.35 ms", "1.204 s". */
static void fmt_time(char *buf, size_t n, double us)
{
	double a = fabs(us);
	if (a >= 1e6)
		snprintf(buf, n, "%.4g s", us / 1e6);
	else if (a >= 1e3)
		snprintf(buf, n, "%.4g ms", us / 1e3);
	else
		snprintf(buf, n, "%.4g \xc2\xb5s", us);
}

/* Axis ticks: a 1-2-5 step giving 6 to 14 intervals over span, in the
 * unit of the span's size. */
typedef struct axis {
	double step;       /* microseconds */
	double scale;      /* microseconds per unit */
	const char *unit;
	int decimals;      /* in labels, enough to tell steps apart */
} axis;

static axis nice_axis(double span)
{
	axis a;
	double raw = span / 8, mag = pow(10, floor(log10(raw))), norm = raw / mag;
	a.step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
	if (span >= 1e6)
		a.scale = 1e6, a.unit = "s";
	else if (span >= 1e3)
		a.scale = 1e3, a.unit = "ms";
	else
		a.scale = 1, a.unit = "\xc2\xb5s";
	a.decimals = (int)-floor(log10(a.step / a.scale) + 1e-9);
	if (a.decimals < 0)
		a.decimals = 0;
	return a;
}

/* Index of each stage among the stages of its device, and the most and
 * the fewest stages a device holds. */
static int *chunk_of_stages(const ir_module *m, int ndev, int *nchunks, int *fewest)
{
	int *chunk = calloc((size_t)m->nstages + 1, sizeof *chunk);
	int *count = calloc((size_t)ndev + 1, sizeof *count);
	if (!chunk || !count)
		ir_bug("out of memory");
	*nchunks = 1;
	for (int s = 0; s < m->nstages; s++) {
		int d = m->stages[s].device;
		if (d < 0 || d >= ndev)
			continue;
		chunk[s] = count[d]++;
		if (count[d] > *nchunks)
			*nchunks = count[d];
	}
	*fewest = *nchunks;
	for (int d = 0; d < ndev; d++)
		*fewest = count[d] < *fewest ? count[d] : *fewest;
	free(count);
	return chunk;
}

static void put_style(FILE *f, int nchunks, bool edges)
{
	fputs("<style>\n"
	      "text{font-family:'Helvetica Neue',Helvetica,Arial,sans-serif;fill:#222}\n"
	      ".title{font-size:15px;font-weight:600}\n"
	      ".legend text{font-size:12px}\n"
	      ".legend .note{fill:#666}\n"
	      ".dev{font-size:13px;font-weight:600;text-anchor:end;dominant-baseline:central}\n"
	      ".util{font-size:11px;fill:#666;dominant-baseline:central}\n"
	      ".axis line{stroke:#444;stroke-width:1}\n"
	      ".axis text{font-size:11px;text-anchor:middle;fill:#444}\n"
	      ".grid{stroke:#fff;stroke-width:1}\n"
	      ".row{fill:" IDLE_FILL "}\n"
	      ".mb{text-anchor:middle;pointer-events:none}\n", f);
	if (edges)
		fputs(".op{stroke:#fff;stroke-width:0.75}\n", f);
	for (int k = 0; k < IR_NOPS; k++)
		for (int c = 0; c < nchunks; c++) {
			unsigned rgb = tint(kind_rgb[k], chunk_tint(c, nchunks));
			fprintf(f, ".op.%s.c%d{fill:#%06x}", ir_op_names[k], c, rgb);
			if (!dark_text_on(rgb))
				fprintf(f, " .mb.%s.c%d{fill:#fff}", ir_op_names[k], c);
			fputc('\n', f);
		}
	fputs("</style>\n", f);
}

static void put_legend(FILE *f, const bool *present, int nchunks, bool even)
{
	double x = LEFT, y = 44, sw = 14;
	fputs("<g class=\"legend\">\n", f);
	for (int k = 0; k < IR_NOPS; k++) {
		if (!present[k])
			continue;
		/* B is the whole backward unless W splits off the weight part. */
		const char *desc = k == IR_OP_B && present[IR_OP_W] ? "input gradient" : kind_desc[k];
		for (int c = 0; c < (nchunks > 1 ? 2 : 1); c++)
			fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#%06x\"/>\n",
			        x + c * sw, y, sw, sw, tint(kind_rgb[k], chunk_tint(c ? nchunks - 1 : 0, nchunks)));
		x += (nchunks > 1 ? 2 : 1) * sw + 6;
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\"><tspan font-weight=\"600\">%s</tspan> %s</text>\n",
		        x, y + 11, ir_op_names[k], desc);
		x += 28 + 6.5 * strlen(desc);
	}
	fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"" IDLE_FILL
	           "\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n<text x=\"%.1f\" y=\"%.1f\">idle</text>\n",
	        x, y, sw, sw, x + sw + 6, y + 11);
	x += sw + 50;
	if (nchunks > 1)
		fprintf(f, "<text class=\"note\" x=\"%.1f\" y=\"%.1f\">lighter shade: later chunk of a device"
		           " (%s%d chunks)</text>\n", x, y + 11, even ? "" : "up to ", nchunks);
	fputs("</g>\n", f);
}

/* One timeline as an <svg> element at height y of the file: the whole
 * figure (viz_svg), or one panel of a comparison (viz_svg_compare), whose
 * panels share span_min so that their time axes agree.  caption, when
 * given, leads the title line.  Returns the element's height. */
static int svg_panel(FILE *f, const ir_module *m, const sim_result *r, double span_min, double y0,
                     const char *caption)
{
	int ndev = r->ndev;

	/* Span of the x axis: the makespan, or the last end if it is unset. */
	double span = isfinite(r->makespan) ? r->makespan : 0;
	if (span < span_min)
		span = span_min;
	bool present[IR_NOPS] = {0};
	int most_ops = 0;
	for (int d = 0; d < ndev; d++) {
		const ir_device *dev = &m->devices[d];
		if (dev->nops > most_ops)
			most_ops = dev->nops;
		for (int i = 0; i < dev->nops; i++) {
			ir_op_kind k = dev->ops[i].kind;
			ir_assert((unsigned)k < IR_NOPS);
			present[k] = true;
			if (isfinite(r->dev[d].end[i]) && r->dev[d].end[i] > span)
				span = r->dev[d].end[i];
		}
	}
	if (!(span > 0))
		span = 1;
	double px = PLOT_W / span; /* pixels per microsecond */

	/* Rows shrink past 16 devices so that the figure stays page-sized. */
	double row_h = ndev <= 16 ? 26 : fmax(4, 416.0 / ndev);
	double pitch = row_h * 1.25;
	double plot_bottom = TOP + (ndev ? ndev * pitch - (pitch - row_h) : 0);
	double axis_y = plot_bottom + 6;
	int height = (int)ceil(axis_y + 46);

	int nchunks, fewest;
	int *chunk = chunk_of_stages(m, ndev, &nchunks, &fewest);
	/* Boxes at least 3 px wide on average get white edges, so that
	 * neighbours stay apart; thinner ones would turn white. */
	bool edges = most_ops == 0 || PLOT_W / (double)most_ops >= 3;

	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" y=\"%.0f\" width=\"%d\" height=\"%d\" "
	           "viewBox=\"0 0 %d %d\">\n<title>", y0, SVG_W, height, SVG_W, height);
	put_text(f, m->model.name, ESC_XML);
	fprintf(f, ": %s pipeline timeline</title>\n", schedule_name(m));
	put_style(f, nchunks, edges);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", SVG_W, height);

	/* Title line. */
	char ms[32];
	fmt_time(ms, sizeof ms, r->makespan);
	fprintf(f, "<text class=\"title\" x=\"%d\" y=\"24\">", LEFT);
	if (caption)
		put_text(f, caption, ESC_XML);
	put_text(f, m->model.name && *m->model.name ? m->model.name : "(unnamed model)", ESC_XML);
	fprintf(f, " \xc2\xb7 %s \xc2\xb7 %d device%s", schedule_name(m), ndev, ndev == 1 ? "" : "s");
	if (nchunks > 1 && fewest == nchunks)
		fprintf(f, " \xc3\x97 %d chunks", nchunks);
	else if (nchunks > 1) /* devices hold different numbers of stages */
		fprintf(f, " \xc2\xb7 %d stages, %d to %d a device", m->nstages, fewest, nchunks);
	fprintf(f, " \xc2\xb7 %lld micro-batch%s \xc2\xb7 makespan %s \xc2\xb7 bubble %.1f%%</text>\n",
	        (long long)m->train.microbatches, m->train.microbatches == 1 ? "" : "es", ms,
	        100 * finite_or_zero(r->bubble_ratio));
	put_legend(f, present, nchunks, fewest == nchunks);

	/* Rows: the idle background, device label and utilisation. */
	for (int d = 0; d < ndev; d++) {
		double y = TOP + d * pitch;
		fprintf(f, "<rect class=\"row\" x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\"/>\n",
		        LEFT, y, PLOT_W, row_h);
		if (row_h >= 9)
			fprintf(f, "<text class=\"dev\" x=\"%d\" y=\"%.2f\">D%d</text>\n", LEFT - 8, y + row_h / 2, d);
		if (row_h >= 9)
			fprintf(f, "<text class=\"util\" x=\"%d\" y=\"%.2f\">%.0f%% busy</text>\n",
			        LEFT + PLOT_W + 6, y + row_h / 2, 100 * finite_or_zero(r->dev[d].busy) / span);
	}

	/* Grid lines at the ticks, behind the boxes; the axis below. */
	axis ax = nice_axis(span);
	int nticks = (int)floor(span / ax.step * (1 + 1e-9)) + 1;
	for (int t = 1; t < nticks && ndev; t++) {
		double x = LEFT + t * ax.step * px;
		fprintf(f, "<line class=\"grid\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\"/>\n", x, TOP, x,
		        plot_bottom);
	}
	fprintf(f, "<g class=\"axis\">\n<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", LEFT, axis_y,
	        LEFT + PLOT_W, axis_y);
	for (int t = 0; t < nticks; t++) {
		double x = LEFT + t * ax.step * px;
		fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>"
		           "<text x=\"%.2f\" y=\"%.2f\">%.*f</text>\n",
		        x, axis_y, x, axis_y + 5, x, axis_y + 18, ax.decimals, t * ax.step / ax.scale);
	}
	fprintf(f, "<text x=\"%.1f\" y=\"%.2f\">time (%s)</text>\n</g>\n", LEFT + PLOT_W / 2.0,
	        axis_y + 38, ax.unit);

	/* The boxes, device by device in program order. */
	for (int d = 0; d < ndev; d++) {
		const ir_device *dev = &m->devices[d];
		const sim_device *sd = &r->dev[d];
		double y = TOP + d * pitch;
		fprintf(f, "<g id=\"D%d\">\n", d);
		for (int i = 0; i < dev->nops; i++) {
			const ir_op *op = &dev->ops[i];
			const ir_stage *st = op_stage(m, op);
			double s = sd->start[i], e = sd->end[i];
			if (!isfinite(s) || !isfinite(e) || op->comm != IR_COMM_NONE) /* the figure draws F, B, W */
				continue;
			const char *k = op_name(op->kind);
			int c = chunk[op->stage];
			double x = LEFT + s * px, w = fmax(0, (e - s) * px);
			fprintf(f, "<rect class=\"op %s c%d\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\">"
			           "<title>%s s%d m%d on D%d, layers L%d..L%d: %.3f\xe2\x80\x93%.3f \xc2\xb5s</title></rect>\n",
			        k, c, x, y, w, row_h, k, op->stage, op->mb, d, st->first, st->last, s, e);
			/* The micro-batch number, as large as the box allows. */
			int digits = snprintf(NULL, 0, "%d", op->mb);
			double font = fmin(fmin(row_h * 0.55, 13), (w - 3) / (0.6 * digits));
			if (font >= 6.5)
				fprintf(f, "<text class=\"mb %s c%d\" x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\">%d</text>\n",
				        k, c, x + w / 2, y + row_h / 2 + font * 0.36, font, op->mb);
		}
		fputs("</g>\n", f);
	}
	fputs("</svg>\n", f);
	free(chunk);
	return height;
}

int viz_svg(const ir_module *m, const sim_result *r, const char *path)
{
	check_pair(m, r);
	FILE *f = open_out(path);
	if (!f)
		return -1;
	svg_panel(f, m, r, 0, 0, NULL);
	return close_out(f, path);
}

/* The panels are drawn into a scratch file first: the outer element needs
 * their heights before them. */
int viz_svg_compare(const ir_module *m, const sim_result *top, const char *top_caption,
                    const sim_result *bottom, const char *bottom_caption, const char *path)
{
	check_pair(m, top);
	check_pair(m, bottom);
	double span = 0;
	const sim_result *rs[2] = {top, bottom};
	for (int k = 0; k < 2; k++) {
		if (isfinite(rs[k]->makespan) && rs[k]->makespan > span)
			span = rs[k]->makespan;
		for (int d = 0; d < rs[k]->ndev; d++)
			for (int i = 0; i < m->devices[d].nops; i++)
				if (isfinite(rs[k]->dev[d].end[i]) && rs[k]->dev[d].end[i] > span)
					span = rs[k]->dev[d].end[i];
	}
	FILE *tmp = tmpfile();
	if (!tmp) {
		diag_error((ir_loc){0}, "cannot write '%s': no scratch file: %s", path, strerror(errno));
		return -1;
	}
	int h = svg_panel(tmp, m, top, span, 0, top_caption);
	h += svg_panel(tmp, m, bottom, span, h, bottom_caption);
	FILE *f = open_out(path);
	if (!f) {
		fclose(tmp);
		return -1;
	}
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	           "viewBox=\"0 0 %d %d\">\n", SVG_W, h, SVG_W, h);
	rewind(tmp);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, tmp)) > 0)
		fwrite(buf, 1, n, f);
	fclose(tmp);
	fputs("</svg>\n", f);
	return close_out(f, path);
}
