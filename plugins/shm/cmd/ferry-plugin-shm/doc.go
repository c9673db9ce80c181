// Command ferry-plugin-shm is Ferry's same-machine shared-memory transport
// plugin. The host starts it; it is not meant to be run by hand.
package main
