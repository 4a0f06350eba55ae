-- An example tuning policy (FLAGCX_TUNING_POLICY=config/policy.lua).
-- The file returns function(op, bytes, dtype, nranks, ranks_per_host) that
-- names an algorithm, or returns nil to leave the choice to the rules of
-- tuning.yaml.  It runs at communicator init once per op, dtype and
-- power-of-two size bucket (bytes is the bucket's smallest size), never per
-- call.  It runs in the same sandbox as algorithm scripts.
return function(op, bytes, dtype, nranks, ranks_per_host)
  if op == "allreduce" then
    if bytes < 32 * 1024 then return "recursive_doubling" end
    if nranks > ranks_per_host and ranks_per_host > 1 and nranks % ranks_per_host == 0
        and bytes >= 4 * 1024 * 1024 then
      return "hierarchical"
    end
    return "ring"
  end
  if op == "alltoall" and nranks >= 16 and bytes <= 256 then return "bruck" end
  return nil
end
