/*****************************************************************************\
 *  slurm_elastic.c - SPANK plugin for elastic deep-learning jobs.
 *
 *  Adds three options to sbatch, salloc and srun:
 *
 *    --elastic[=MIN:MAX]     the job may run on MIN..MAX GPUs, 1 <= MIN <=
 *                            65536, MAX 0 (no maximum) or MIN <= MAX <= 65536
 *                            (no value: 1:0, i.e. at least 1 GPU and no
 *                            maximum)
 *    --elastic-batch=MIN:MAX global batch-size range the job accepts,
 *                            1 <= MIN <= MAX <= 16777216
 *    --elastic-mode=exo|endo who decides the batch size: the scheduler (exo,
 *                            the default) or the job itself (endo)
 *
 *  A number is "0" or [1-9][0-9]*: ASCII digits only, no sign, blank or
 *  leading zero.  This is the grammar of slurm_elastic/contract.py (the
 *  daemon) and job_submit.lua; tests/unit/test_elastic_grammar.py runs one
 *  table of values through all three.
 *
 *  The values are checked on the submit host; a bad value is refused with one
 *  line naming it and the rule.  Valid values are placed in the job control
 *  environment as ELASTIC, ELASTIC_BATCH and ELASTIC_MODE; slurmctld sees them
 *  as SPANK_ELASTIC* in the job's spank_job_env, where job_submit.lua turns
 *  them into the AdminComment record read by the slurm-elastic daemon.
 *
 *  This plugin never fails in remote context (slurmstepd): a failing remote
 *  init would drain the node.
 *
 *  Build: slurm-elastic install-plugin (gcc -shared -fPIC against the
 *  installed <slurm/spank.h>).
\*****************************************************************************/

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

SPANK_PLUGIN(slurm_elastic, 1);

#define ELASTIC_VALUE_LEN 64

static char elastic_gpus[ELASTIC_VALUE_LEN] = "";
static char elastic_batch[ELASTIC_VALUE_LEN] = "";
static char elastic_mode[ELASTIC_VALUE_LEN] = "";

static int _opt_elastic(int val, const char *optarg, int remote);
static int _opt_elastic_batch(int val, const char *optarg, int remote);
static int _opt_elastic_mode(int val, const char *optarg, int remote);

/* Registered in slurm_spank_init(), not exported as spank_options: that
 * name makes Slurm register the table a second time. */
static struct spank_option elastic_options[] = {
	{ "elastic", "[MIN:MAX]",
	  "Job may be resized between MIN and MAX GPUs by slurm-elastic "
	  "(1..65536; MAX 0: no maximum; no value: 1 GPU up, no maximum).",
	  2, 0, _opt_elastic },
	{ "elastic-batch", "MIN:MAX",
	  "Global batch size range slurm-elastic may choose from "
	  "(1..16777216).",
	  1, 0, _opt_elastic_batch },
	{ "elastic-mode", "exo|endo",
	  "exo: slurm-elastic sets the batch size (default); "
	  "endo: the job sets it.",
	  1, 0, _opt_elastic_mode },
	SPANK_OPTIONS_TABLE_END
};

#define ELASTIC_MAX_GPUS 65536L
#define ELASTIC_MAX_BATCH 16777216L

/*
 * Read one number at *p: "0" or [1-9][0-9]* in ASCII digits, at most limit.
 * RET 0 and advance *p past it, or -1 (no digit, a leading zero, above limit).
 */
static int _parse_number(const char **p, long limit, long *out)
{
	const char *s = *p;
	long value = 0;

	if (*s < '0' || *s > '9')
		return -1;
	if (*s == '0') {
		s++;
	} else {
		while (*s >= '0' && *s <= '9') {
			value = value * 10 + (*s - '0');
			if (value > limit)	/* value <= limit before: no overflow */
				return -1;
			s++;
		}
	}
	if (*s >= '0' && *s <= '9')	/* a leading zero */
		return -1;
	*out = value;
	*p = s;
	return 0;
}

/*
 * Parse "MIN:MAX" with 1 <= MIN <= limit and MIN <= MAX <= limit (or MAX 0,
 * no maximum, when open) into buf. RET 0 on success, -1 on a bad value.
 */
static int _parse_range(const char *arg, long limit, int open, char *buf,
			size_t len)
{
	long min, max;

	if (!arg)
		return -1;
	if (_parse_number(&arg, limit, &min) || *arg != ':')
		return -1;
	arg++;
	if (_parse_number(&arg, limit, &max) || *arg != '\0')
		return -1;
	if (min < 1)
		return -1;
	if (max < min && !(open && max == 0))
		return -1;
	snprintf(buf, len, "%ld:%ld", min, max);
	return 0;
}

static int _opt_elastic(int val, const char *optarg, int remote)
{
	if (!optarg) {
		snprintf(elastic_gpus, sizeof(elastic_gpus), "1:0");
		return 0;
	}
	if (_parse_range(optarg, ELASTIC_MAX_GPUS, 1, elastic_gpus,
			 sizeof(elastic_gpus))) {
		elastic_gpus[0] = '\0';
		if (remote)
			return 0;
		slurm_error("--elastic: invalid value '%s': expected MIN:MAX "
			    "in ASCII digits with 1 <= MIN <= 65536 and MAX 0 "
			    "(no maximum) or MIN <= MAX <= 65536 (e.g. "
			    "--elastic=2:8)", optarg);
		return -1;
	}
	return 0;
}

static int _opt_elastic_batch(int val, const char *optarg, int remote)
{
	if (_parse_range(optarg, ELASTIC_MAX_BATCH, 0, elastic_batch,
			 sizeof(elastic_batch))) {
		elastic_batch[0] = '\0';
		if (remote)
			return 0;
		slurm_error("--elastic-batch: invalid value '%s': expected "
			    "MIN:MAX in ASCII digits with 1 <= MIN <= MAX <= "
			    "16777216 (e.g. --elastic-batch=64:512)",
			    optarg ? optarg : "");
		return -1;
	}
	return 0;
}

static int _opt_elastic_mode(int val, const char *optarg, int remote)
{
	if (optarg && (!strcmp(optarg, "exo") || !strcmp(optarg, "endo"))) {
		snprintf(elastic_mode, sizeof(elastic_mode), "%s", optarg);
		return 0;
	}
	if (remote)
		return 0;
	slurm_error("--elastic-mode: invalid value '%s': expected exo or endo "
		    "(e.g. --elastic-mode=endo)", optarg ? optarg : "");
	return -1;
}

extern int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	struct spank_option *opt;

	if ((ctx != S_CTX_ALLOCATOR) && (ctx != S_CTX_LOCAL) &&
	    (ctx != S_CTX_REMOTE))
		return 0;

	for (opt = elastic_options; opt->name; opt++) {
		if (spank_option_register(sp, opt) != ESPANK_SUCCESS) {
			if (ctx == S_CTX_REMOTE)
				continue;
			slurm_error("slurm_elastic: cannot register --%s",
				    opt->name);
			return -1;
		}
	}
	return 0;
}

static int _set(spank_t sp, const char *name, const char *value)
{
	spank_err_t rc = spank_job_control_setenv(sp, name, value, 1);

	if (rc != ESPANK_SUCCESS) {
		slurm_error("slurm_elastic: cannot set %s=%s: %s",
			    name, value, spank_strerror(rc));
		return -1;
	}
	return 0;
}

extern int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	if ((ctx != S_CTX_ALLOCATOR) && (ctx != S_CTX_LOCAL))
		return 0;
	if (!elastic_gpus[0]) {
		if (elastic_batch[0] || elastic_mode[0]) {
			slurm_error("--elastic-batch and --elastic-mode need "
				    "--elastic (e.g. --elastic=2:8)");
			return -1;
		}
		return 0;
	}
	if (_set(sp, "ELASTIC", elastic_gpus))
		return -1;
	if (elastic_batch[0] && _set(sp, "ELASTIC_BATCH", elastic_batch))
		return -1;
	if (_set(sp, "ELASTIC_MODE", elastic_mode[0] ? elastic_mode : "exo"))
		return -1;
	return 0;
}
