// Package benchhost describes the machine a benchmark runs on, for the
// header of the pages the benchmarks write: its CPU model, core count and
// kernel (Machine), and how busy it is (LoadAvg). It reads /proc only.
package benchhost
