//! The lifecycle's tests: the resolution rules ([`resolution`]) and their
//! invariants ([`invariants`]), and the run state's rules over time
//! ([`runs`]).

mod invariants;
mod resolution;
mod runs;
