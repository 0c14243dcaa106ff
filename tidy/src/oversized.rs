//! The files and functions tolerated over the size limits ([`crate::size`]),
//! one a line: the length when listed, the file (`path`) or function
//! (`path::name`), and why it is still long. An entry may not grow, and
//! fails once it is no longer needed, so remove it when its code is split;
//! never add one.

use crate::size::SizeException;

/// `lines item  reason`, one entry a line.
const TABLE: &str = "
   96 agent/src/process.rs::watch  the process watch loop and its transitions
  114 agent/tests/it/partition.rs::the_majority_fences_and_reports_the_isolated_member_which_does_nothing  one test scenario told start to end
  112 api-service/src/server.rs::run  the API's start-up in one sequence
  228 api-service/src/status/ledger.rs::apply  one match over every run event the ledger applies
  212 api-service/tests/it/auth/mod.rs::codes  a table: every RPC and its required role
  327 api-service/tests/it/bad_input.rs::bad_requests_name_the_field_and_change_nothing  a table of bad requests and the field each names
   92 api-service/tests/it/limits.rs::an_anonymous_flood_from_one_address_does_not_refuse_an_agents_reports  one test scenario told start to end
 1113 api-service/tests/it/props/engine_stream.rs  the engine-stream property test: model, generators and checks
  109 api-service/tests/it/props/engine_stream.rs::check_store  every invariant checked on the stored run
  134 api-service/tests/it/props/engine_stream.rs::dispatcher_persists_or_refuses_what_a_bad_engine_sends  one test scenario told start to end
  114 api-service/tests/it/props/engine_stream.rs::message  a generator of every engine message
  757 api-service/tests/it/props/requests.rs  the request property test: every RPC's call and check
  228 api-service/tests/it/props/requests.rs::call  one exhaustive match calling every RPC
  100 api-service/tests/it/props/requests.rs::check_requests  every RPC's answer checked against the model
  103 api-service/tests/it/props/requests.rs::fixture  the property's fixture: segments, hosts and reports
  127 api-service/tests/it/rest/cloud.rs::a_rest_notification_is_recovered_and_watched_over_grpc  one test scenario told start to end
   97 api-service/tests/it/rest/hosts.rs::hosts_are_created_shown_updated_and_deleted  one test scenario told start to end
  108 api-service/tests/it/rest/notifications.rs::notification_bodies_are_checked  one test scenario told start to end
  107 api-service/tests/it/rest/notifications.rs::notifications_are_accepted_as_masakari_does  one test scenario told start to end
   97 api-service/tests/it/rest/notifications.rs::notifications_are_listed_filtered_and_paged  one test scenario told start to end
  111 api-service/tests/it/rest/protocol.rs::tokens_go_through_the_guard  one test scenario told start to end
   88 api-service/tests/it/rest/segments.rs::segment_bodies_are_checked  one test scenario told start to end
  111 api-service/tests/it/rest/segments.rs::segments_are_listed_filtered_sorted_and_paged  one test scenario told start to end
  116 bench/src/intake.rs::load  the intake load with its clients and measures
   81 bench/src/masakari/intake.rs::load  the Masakari intake load with its clients and measures
   87 bench/src/masakari/model.rs::model  Masakari's recovery model in one function
  676 bench/src/real.rs  the benchmark's real-stack mode: set-up, recovery and Nova's ideal
   88 bench/src/real.rs::recover  one recovery on the real stack in one sequence
   84 bench/src/real.rs::run  the real-stack mode in one sequence
  106 bench/src/report.rs::judge  every judgement of a run's results in a row
  217 bench/src/report.rs::tables  every table of the report in a row
  167 cli/src/demo.rs::run  the demo's story told in one sequence
  123 cli/tests/it/notifications.rs::create_list_show  one test scenario told start to end
  110 cli/tests/it/notifications.rs::refusals_have_their_exit_codes  one test scenario told start to end
  603 conformance/src/records.rs  the REST client of Nova's, Cinder's and Placement's records
   97 conformance/tests/it/faults.rs::nova_conductor_killed_mid_recovery  one test scenario told start to end
  671 conformance/tests/it/sim_vs_real.rs  each failure on both clouds and the comparison
   86 conformance/tests/it/sim_vs_real.rs::differences  one test scenario told start to end
  102 conformance/tests/it/sim_vs_real.rs::on_real  one test scenario told start to end
  135 conformance/tests/it/sim_vs_real.rs::on_sim  one test scenario told start to end
  170 engine-service/src/recovery/evacuate.rs::evacuate_locked  the evacuation of a locked instance, step by step
  142 engine-service/src/recovery/host.rs::host_failure_steps  the host-failure workflow, step by step
  122 engine-service/src/recovery/process.rs::process_failure_steps  the process-failure workflow, step by step
 1111 engine-service/tests/it/fault_matrix.rs  the fault matrix: call sites, faults, runner and invariants
   91 engine-service/tests/it/fault_matrix.rs::invariant_violations  every invariant checked in a row
  229 engine-service/tests/it/fault_matrix.rs::run_scenario  one scenario of the matrix run start to end
  103 engine-service/tests/it/fault_matrix.rs::summary  the matrix's summary table
  106 engine-service/tests/it/host_failure.rs::a_failed_host_is_recovered_and_its_services_can_be_restored  one test scenario told start to end
  149 engine-service/tests/it/outage_matrix.rs::one  one outage case run start to end
  799 engine-service/tests/it/process_faults.rs  the process-fault tests and their child-process harness
   82 engine-service/tests/it/process_faults/binaries.rs::build  the binaries built once, with their timeouts
  142 engine-service/tests/it/telemetry.rs::one_trace_from_the_agent_to_nova_and_metrics_after_a_recovery  one test scenario told start to end
   83 engine-service/tests/it/volumes.rs::stale_attachments_are_cleared_and_bfv_recovers_as_fast_as_ephemeral  one test scenario told start to end
   96 engine-service/tests/it/watch.rs::several_watchers_a_late_joiner_and_a_stalled_one  one test scenario told start to end
  191 migrations/src/m20261129_000001_initial.rs::up  the initial schema, every table in one migration
  639 openstack-client/src/nova.rs  every typed Nova call
   93 openstack-client/src/nova.rs::update_service  a service update and its confirmation by reading back
  773 openstack-sim/src/cinder.rs  the simulated Cinder API
  106 openstack-sim/src/keystone.rs::issue_token  one token issue with each auth method
  644 openstack-sim/src/nova/hosts.rs  the simulated services, hypervisors and os-hosts APIs
   88 openstack-sim/src/nova/hosts.rs::hypervisors  the hypervisors API's filters and views
   86 openstack-sim/src/nova/hosts.rs::legacy_update  the pre-2.53 service update rules
  121 openstack-sim/src/nova/hosts.rs::update_service  the 2.53 service update rules
   87 openstack-sim/src/nova/migrations.rs::list  the migrations API's filters, sorting and paging
   98 openstack-sim/src/nova/server_actions.rs::action  one match over every server action
   85 openstack-sim/src/nova/server_actions.rs::evacuate_request  the evacuate body per microversion
   89 openstack-sim/src/nova/servers.rs::list  the servers API's filters, sorting and paging
  145 openstack-sim/src/nova/servers.rs::server_view  a server's fields by microversion and role
  730 openstack-sim/src/scenario.rs  scenario files: schema, validation and expansion
  185 openstack-sim/src/server.rs::handle  the router of every simulated endpoint
 1047 openstack-sim/src/world/evacuation.rs  the world's model of an evacuation
  157 openstack-sim/src/world/evacuation.rs::evacuate  an evacuation's checks and state walk
  687 openstack-sim/tests/it/cinder.rs  the simulated Cinder's contract tests
   85 openstack-sim/tests/it/cinder.rs::an_attachment_given_a_connector_leaves_the_volume_attaching  one test scenario told start to end
   84 openstack-sim/tests/it/cinder.rs::reset_status_rules_and_quirks  one test scenario told start to end
  179 openstack-sim/tests/it/cinder.rs::the_attachment_lifecycle  one test scenario told start to end
   82 openstack-sim/tests/it/cinder.rs::volume_fields_and_visibility  one test scenario told start to end
  157 openstack-sim/tests/it/control.rs::control_endpoints_drive_the_world  one test scenario told start to end
   85 openstack-sim/tests/it/keystone.rs::password_token_has_the_contract_shape_and_catalog  one test scenario told start to end
  824 openstack-sim/tests/it/nova_admin.rs  the simulated Nova's admin API tests
   92 openstack-sim/tests/it/nova_admin.rs::hypervisors_with_servers_patterns_and_paging  one test scenario told start to end
   90 openstack-sim/tests/it/nova_admin.rs::migrations_filter_sort_page_and_show_owners  one test scenario told start to end
  134 openstack-sim/tests/it/nova_admin.rs::service_updates_follow_the_2_53_rules  one test scenario told start to end
  266 openstack-sim/tests/it/nova_admin.rs::stop_start_lock_and_reset_state  one test scenario told start to end
  666 openstack-sim/tests/it/nova_evacuate.rs  the simulated Nova's evacuation tests
   81 openstack-sim/tests/it/nova_evacuate.rs::bodies_follow_each_microversion_schema  one test scenario told start to end
   89 openstack-sim/tests/it/nova_evacuate.rs::failure_modes_leave_the_states_nova_leaves  one test scenario told start to end
  159 openstack-sim/tests/it/nova_evacuate.rs::the_state_walk_changes_the_host_after_task_state_and_before_done  one test scenario told start to end
   97 openstack-sim/tests/it/nova_evacuate.rs::volumes_move_with_new_attachments_on_the_destination  one test scenario told start to end
   95 openstack-sim/tests/it/nova_servers.rs::all_tenants_is_admin_only_and_host_is_ignored_for_others  one test scenario told start to end
   92 openstack-sim/tests/it/nova_servers.rs::fields_appear_by_microversion_and_role  one test scenario told start to end
   83 openstack-sim/tests/it/nova_servers.rs::microversions_are_negotiated_echoed_and_refused  one test scenario told start to end
  114 openstack-sim/tests/it/nova_servers.rs::paging_walks_every_page_with_servers_links  one test scenario told start to end
";

/// The entries of the table.
pub fn oversized() -> Vec<SizeException> {
    parse(TABLE)
}

fn parse(table: &str) -> Vec<SizeException> {
    table
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| {
            let mut fields = line.splitn(3, ' ').map(str::trim);
            let (Some(lines), Some(item), Some(reason)) =
                (fields.next(), fields.next(), fields.next())
            else {
                panic!("tidy's oversized table: `{line}` is not `lines item reason`");
            };
            SizeException {
                item: item.to_owned(),
                lines: lines.parse().unwrap_or_else(|_| {
                    panic!("tidy's oversized table: `{lines}` is not a number")
                }),
                reason: reason.to_owned(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_a_length_an_item_and_a_reason() {
        let entries = oversized();
        assert!(!entries.is_empty());
        for e in &entries {
            assert!(!e.reason.is_empty(), "{}", e.item);
            assert!(e.item.contains(".rs"), "{}", e.item);
        }
        let mut items: Vec<&str> = entries.iter().map(|e| e.item.as_str()).collect();
        items.sort_unstable();
        items.dedup();
        assert_eq!(items.len(), entries.len(), "an item listed twice");
    }

    #[test]
    fn a_line_is_lines_item_and_reason() {
        let parsed = parse("\n  116 a/src/b.rs::start  the start-up in one sequence\n");
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].lines, 116);
        assert_eq!(parsed[0].item, "a/src/b.rs::start");
        assert_eq!(parsed[0].reason, "the start-up in one sequence");
    }
}
