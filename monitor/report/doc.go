// Package report turns a run's folder into one self-contained HTML page:
// the run's summary and configuration, its loss, throughput and device
// curves from metrics.jsonl, the bottleneck diagnosis from
// telemetry.json, and what lab.json holds when there is one: the batch-size
// sweep, the DataParallel-against-DDP comparison and the recap.
//
// The page has no scripts, fonts or links to fetch: plots are inline SVG
// drawn here (LinePlot, which other commands may reuse), and all text is
// escaped. Lines of metrics.jsonl are read as JSON objects of numbers,
// so a field the trainer adds later is plotted without a change here.
// `fleet report RUN_DIR` writes RUN_DIR/report.html.
package report
