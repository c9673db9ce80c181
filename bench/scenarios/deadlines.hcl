# Deadlines under load: a MEDIUM stream of 256 KiB reads with a 20 ms
# deadline, paced at 50 MB/s, beside a saturating LOW stream of 64 MiB
# writes. Deadline promotion should raise the MEDIUM class's SLO
# attainment (compare `slo_attainment` with and without the qos block's
# promotion); a HIGH stream of 4 KiB reads gives the isolation figure.
#
#   ferry bench --qos bench/scenarios/deadlines.hcl --config qos.hcl

duration = "1s"
warmup   = "200ms"
rounds   = 3

stream "decode" {
  op       = "read"
  size     = "4KiB"
  priority = "high"
  intent   = "foreground_get"
  deadline = "5ms"
}

stream "prefetch" {
  op       = "read"
  size     = "256KiB"
  batch    = 4
  threads  = 2
  priority = "medium"
  intent   = "background_prefetch"
  deadline = "20ms"
  rate     = "50MB"
}

stream "offload" {
  op       = "write"
  size     = "64MiB"
  threads  = 2
  priority = "low"
  intent   = "checkpoint"
}
