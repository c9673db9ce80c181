// Command ferry-plugin-tcp is Ferry's TCP transport plugin. The host starts
// it; it is not meant to be run by hand.
package main
