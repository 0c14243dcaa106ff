//! The database schema of instance-ha as sea-orm migrations, applied by
//! `instanceha-api` at start on SQLite, PostgreSQL or MySQL/MariaDB.

use sea_orm_migration::prelude::*;

mod m20261129_000001_initial;
mod m20261202_000001_runs;
mod m20261205_000001_prior_state;
mod m20261205_000002_lifecycle;
mod m20261205_000003_health_probe;
mod m20261205_000004_return_to_service;

/// Every migration, in order.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261129_000001_initial::Migration),
            Box::new(m20261202_000001_runs::Migration),
            Box::new(m20261205_000001_prior_state::Migration),
            Box::new(m20261205_000002_lifecycle::Migration),
            Box::new(m20261205_000003_health_probe::Migration),
            Box::new(m20261205_000004_return_to_service::Migration),
        ]
    }
}

pub use sea_orm_migration::MigratorTrait;
