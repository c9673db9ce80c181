// Package intent owns the vocabulary of request intents: the Intent type,
// the known intents in the order the selector numbers its match bits by,
// and their parsing from text.
//
// It sits below config and the deciders so that both can name an intent:
// config matches policies on it (and re-exports it as config.Intent, as
// host does as host.Intent), while the deciders (host/admission,
// host/selector) take it as a plain fact of a request without importing
// config. It must not import anything of Ferry's. An intent never crosses
// the plugin boundary, so it is not sdk's (see sdk/vocab.go for what is).
package intent
