--[[
 job_submit.lua of slurm-elastic: turns the --elastic SPANK options into the job's AdminComment.

 The SPANK plugin puts ELASTIC=MIN:MAX (GPUs, MAX 0 = no maximum), ELASTIC_BATCH=MIN:MAX (optional)
 and ELASTIC_MODE=exo|endo into the job's spank_job_env (jobs see them as SPANK_ELASTIC*). This script checks
 them again with the same grammar (that of slurm_elastic/contract.py; tests/unit/test_elastic_grammar.py runs
 one table through the plugin, this file and the daemon's reader):

     ELASTIC        MIN:MAX, 1 <= MIN <= 65536, MAX 0 (no maximum) or MIN <= MAX <= 65536
     ELASTIC_BATCH  MIN:MAX, 1 <= MIN <= MAX <= 16777216
     ELASTIC_MODE   exo or endo

 where a number is "0" or [1-9][0-9]* in ASCII digits (no sign, blank or leading zero), and writes the
 canonical record the slurm-elastic daemon parses:

     slurm-elastic gpus=MIN:MAX[ batch=MIN:MAX] mode=exo|endo

 (space-separated keys; the first token is literally "slurm-elastic"). Users cannot change
 AdminComment, so the record is trustworthy. Elastic jobs are held for HOLD_S seconds (a begin
 time) so the daemon can choose their size first. Jobs without --elastic are left alone.
--]]

local PREFIX = "slurm-elastic"

-- Seconds an elastic job waits before Slurm may start it at its requested size: the daemon sizes
-- and releases it sooner (scontrol update ... StartTime=now). If the daemon is down or in shadow
-- mode, the job simply starts after this delay: nothing is ever stranded.
local HOLD_S = 10

local function spank_env(job_desc)
   local found = {}
   local env = job_desc.spank_job_env
   if env == nil then
      return found
   end
   -- the table is indexed from 0: use pairs, not ipairs
   for _, entry in pairs(env) do
      -- slurmctld holds the entries without the SPANK_ prefix that job environments show
      local key, value = string.match(entry, "^(ELASTIC[%w_]*)=(.*)$")
      if key == nil then
         key, value = string.match(entry, "^SPANK_(ELASTIC[%w_]*)=(.*)$")
      end
      if key ~= nil then
         found[key] = value
      end
   end
   return found
end

local MAX_GPUS = 65536
local MAX_BATCH = 16777216

-- "0" or [1-9][0-9]* in ASCII digits (never %d: it follows the C locale), at most limit; else nil
local function number(text, limit)
   if text ~= "0" and (string.match(text, "^[1-9][0-9]*$") == nil or #text > 8) then
      return nil
   end
   local value = tonumber(text)
   if value > limit then
      return nil
   end
   return value
end

local function valid_range(text, limit, allow_open)
   local lo, hi = string.match(text or "", "^([0-9]+):([0-9]+)$")
   if lo == nil then
      return false
   end
   lo, hi = number(lo, limit), number(hi, limit)
   if lo == nil or hi == nil or lo < 1 then
      return false
   end
   if hi == 0 and allow_open then
      return true
   end
   return hi >= lo
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local env = spank_env(job_desc)
   local gpus = env["ELASTIC"]
   if gpus == nil then
      return slurm.SUCCESS
   end
   if not valid_range(gpus, MAX_GPUS, true) then
      slurm.log_user("--elastic: invalid value '%s': expected MIN:MAX in ASCII digits with 1 <= MIN <= 65536 and "
                     .. "MAX 0 (no maximum) or MIN <= MAX <= 65536 (e.g. --elastic=2:8)", gpus)
      return slurm.ERROR
   end
   local record = PREFIX .. " gpus=" .. gpus
   local batch = env["ELASTIC_BATCH"]
   if batch ~= nil then
      if not valid_range(batch, MAX_BATCH, false) then
         slurm.log_user("--elastic-batch: invalid value '%s': expected MIN:MAX in ASCII digits with "
                        .. "1 <= MIN <= MAX <= 16777216", batch)
         return slurm.ERROR
      end
      record = record .. " batch=" .. batch
   end
   local mode = env["ELASTIC_MODE"] or "exo"
   if mode ~= "exo" and mode ~= "endo" then
      slurm.log_user("--elastic-mode: invalid value '%s': expected exo or endo", mode)
      return slurm.ERROR
   end
   job_desc.admin_comment = record .. " mode=" .. mode
   local hold_until = os.time() + HOLD_S
   if job_desc.begin_time == nil or job_desc.begin_time < hold_until then
      job_desc.begin_time = hold_until
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

slurm.log_info("slurm-elastic job_submit.lua loaded")
return slurm.SUCCESS
