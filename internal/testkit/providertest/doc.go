// Package providertest holds checks every packet provider should pass,
// shared by the providers' own tests.
package providertest
