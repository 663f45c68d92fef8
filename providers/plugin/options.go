package plugin

// Options configures a device of a plugin (vroce.Config.ProviderOptions
// with Provider "plugin:NAME"). Options of any other type are the
// plugin's provider's own, sent to it as JSON.
type Options struct {
	// Checksum is the SHA-256 (64 hex digits) the plugin binary must have;
	// empty means $VROCE_PLUGIN_SHA256, and that empty pins nothing.
	Checksum string
	// Provider holds the options of the provider the plugin runs,
	// sent to it as JSON (udp.Options, say).
	Provider any
}
