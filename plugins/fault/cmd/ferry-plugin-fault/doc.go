// Command ferry-plugin-fault is a fault-injection plugin for tests; never
// configure it in production. It is Ferry's TCP transport with faults
// injected as its configuration says (see package fault). The host starts
// it; it is not meant to be run by hand.
package main
