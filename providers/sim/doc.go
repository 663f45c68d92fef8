// Package sim is an in-process network for tests and experiments: devices
// attach to a Network by address and exchange packets through it, with
// seeded, reproducible loss, reordering, duplication, corruption, delay, a
// rate-limited bottleneck per receiver, and partitions. Nothing leaves the
// process.
//
//	net := sim.NewNetwork(sim.Config{Seed: 1, Loss: 0.01})
//	defer net.Close()
//	dev, err := vroce.Open(vroce.Config{Provider: "sim", Addr: "127.0.0.1:4791", ProviderOptions: net})
//
// Importing the package registers the provider "sim". Without a *Network in
// ProviderOptions, devices share one process-wide fault-free network.
package sim
