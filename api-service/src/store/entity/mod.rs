//! sea-orm entities, one per table of `instanceha-migrations`. Enumerations
//! are stored as Masakari's strings and converted in the store, so the
//! domain types carry no sea-orm derives.

pub mod health_probe;
pub mod host;
pub mod instance_step;
pub mod notification;
pub mod progress_event;
pub mod segment;
pub mod vmove;
