// Package report reads what the loader shim reports: the JSON lines a
// process under the shim appends to DLBUNDLE_REPORT at its exit
// (loader/shim/report.c) or to the node's records, and the summary
// `dlbundle report`, `build --from` and the HTML page make of them: the
// paths the image lacked, those left out by the build's policy, the
// fallbacks to the file system and the build command that folds the misses
// in.
//
// It is its own package, apart from loader, because its readers are not the
// ranks: the CLI's report, build and page verbs and package view read
// reports, and a rank never does. It imports squash (the build's policy
// says which misses are by design), which loader, the code every rank runs,
// has no use for.
//
// The lines come from processes of the app, which may be anyone's and may
// have been cut short: ReadReports skips lines that are not reports
// (FuzzReadReports), and every path is printed through untrusted.Quote.
// It must not run anything, read an image or a stage, or write a file.
package report
