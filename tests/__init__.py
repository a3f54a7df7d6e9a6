"""The test suite, a package so that its shared helpers import as
`tests.support` (pytest puts the repository root, the folder above this
package, on the import path)."""
