package inbox

// LastFromRefusal is lastFromRefusal, for the external tests.
var LastFromRefusal = lastFromRefusal
