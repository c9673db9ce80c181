package metrics

import dto "github.com/prometheus/client_model/go"

// dtoMetric holds one metric as the client library writes it.
type dtoMetric struct{ dto.Metric }

type dtoFamily = dto.MetricFamily
