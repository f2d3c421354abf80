package orderdb

// MigrateTo is migrateTo, for the tests of upgrades from an older schema.
var MigrateTo = migrateTo
