//! The lifecycle's tests: the resolution rules and their invariants
//! ([`resolution`]), and the run state's rules over time ([`runs`]).

mod resolution;
mod runs;
