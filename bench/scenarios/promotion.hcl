# Deadline promotion on a real engine: LOW 1 MiB writes with a 100 ms
# deadline, paced at 20 MB/s, beside a saturating MEDIUM stream of 16 MiB
# writes, under a qos block that keeps 32 MiB in flight. The MEDIUM
# stream always has requests held back, so without promotion a LOW
# request waits behind them until its deadline passes; with promotion it
# moves up to MEDIUM 40 ms before its deadline and goes at the next
# completion. Run it once with each engine config, interleaved:
#
#   for i in 1 2 3; do for p in off on; do
#     ferry bench --qos bench/scenarios/promotion.hcl \
#       --config bench/scenarios/engines/promotion-$p.hcl --jsonl promotion-$p.jsonl
#   done; done
#
# The figures: the low class's deadlines and deadlines_met (missed is the
# difference) and slo_attainment, with promotion off and on.

duration   = "2s"
warmup     = "300ms"
rounds     = 3
transports = ["tcp", "shm"]

stream "load" {
  op       = "write"
  size     = "16MiB"
  threads  = 4
  priority = "medium"
}

stream "late" {
  op       = "write"
  size     = "1MiB"
  threads  = 2
  priority = "low"
  deadline = "100ms"
  rate     = "20MB"
}
