//! `-f value`, `-f csv` and `-c COLUMN`, run as an operator runs them, with
//! the exact text a script would read.

use crate::helpers::spawn_api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn value_and_csv_print_the_columns_picked_in_the_order_given() {
    let app = spawn_api().await;
    app.segment("rack-1", &[]).await;
    app.segment(
        "rack-2",
        &["--description", "the \"B\" rack, upstairs", "--disabled"],
    )
    .await;
    let listed = app.json(&["segment", "list"]).await;
    let segments = listed.as_array().expect("an array");
    assert_eq!(segments.len(), 2);
    let field = |i: usize, name: &str| segments[i][name].as_str().unwrap().to_owned();
    let description = |i: usize| match field(i, "description") {
        d if d.is_empty() => "-".to_owned(),
        d => d,
    };

    let value = app
        .run(&[
            "segment", "list", "-f", "value", "-c", "name", "-c", "enabled", "-c", "id",
        ])
        .await;
    value.expect_exit(0);
    let expected: String = (0..2)
        .map(|i| {
            format!(
                "{} {} {}\n",
                field(i, "name"),
                segments[i]["enabled"],
                field(i, "id")
            )
        })
        .collect();
    assert_eq!(value.stdout, expected);

    let csv = app
        .run(&[
            "segment",
            "list",
            "--format",
            "csv",
            "--column",
            "name",
            "-c",
            "description",
        ])
        .await;
    csv.expect_exit(0);
    let mut expected = "\"name\",\"description\"\n".to_owned();
    for i in 0..2 {
        expected.push_str(&format!(
            "\"{}\",\"{}\"\n",
            field(i, "name"),
            description(i).replace('"', "\"\"")
        ));
    }
    assert_eq!(csv.stdout, expected);
    assert!(
        csv.stdout.contains("\"the \"\"B\"\" rack, upstairs\""),
        "{}",
        csv.stdout
    );

    // Without -c: every list column, the header first.
    let all = app.run(&["segment", "list", "-f", "csv"]).await;
    all.expect_exit(0);
    assert_eq!(
        all.stdout.lines().next(),
        Some("\"id\",\"name\",\"recovery_method\",\"service_type\",\"enabled\",\"description\"")
    );
    assert_eq!(all.stdout.lines().count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_pick_the_fields_of_one_record_in_every_format() {
    let app = spawn_api().await;
    let id = app.segment("rack-1", &["--description", "first"]).await;

    let value = app
        .run(&[
            "segment",
            "show",
            "rack-1",
            "-f",
            "value",
            "-c",
            "description",
            "-c",
            "id",
        ])
        .await;
    value.expect_exit(0);
    assert_eq!(value.stdout, format!("first\n{id}\n"));

    let csv = app
        .run(&[
            "-f",
            "csv",
            "segment",
            "show",
            &id,
            "-c",
            "name",
            "-c",
            "recovery_method",
        ])
        .await;
    csv.expect_exit(0);
    assert_eq!(
        csv.stdout,
        "\"name\",\"recovery_method\"\n\"rack-1\",\"auto\"\n"
    );

    let json = app
        .run(&[
            "segment", "show", &id, "-f", "json", "-c", "name", "-c", "id",
        ])
        .await;
    json.expect_exit(0);
    assert_eq!(
        json.stdout,
        format!("{{\n  \"name\": \"rack-1\",\n  \"id\": \"{id}\"\n}}\n")
    );

    let yaml = app
        .run(&["segment", "list", "-f", "yaml", "-c", "name"])
        .await;
    yaml.expect_exit(0);
    assert_eq!(yaml.stdout, "- name: rack-1\n");

    let table = app
        .run(&["segment", "show", &id, "-c", "created_at", "-c", "name"])
        .await;
    table.expect_exit(0);
    let rows: Vec<&str> = table
        .stdout
        .lines()
        .filter(|line| line.starts_with("| ") && !line.contains("Field"))
        .collect();
    assert_eq!(rows.len(), 2, "{}", table.stdout);
    assert!(rows[0].starts_with("| created_at"), "{}", table.stdout);
    assert!(
        rows[1].starts_with("| name ") && rows[1].contains("rack-1"),
        "{}",
        table.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_column_is_refused_before_anything_changes() {
    let app = spawn_api().await;
    app.run(&["segment", "list", "-c", "name", "-c", "colour"])
        .await
        .expect_exit(2)
        .expect_stderr("--column \"colour\"")
        .expect_stderr("id, name, recovery_method, service_type, enabled, description");

    // A record's fields are not a list's columns: `show` offers them all.
    app.run(&[
        "segment",
        "create",
        "rack-1",
        "--recovery-method",
        "auto",
        "-c",
        "colour",
    ])
    .await
    .expect_exit(2)
    .expect_stderr("return_to_service, created_at, updated_at");
    let listed = app.json(&["segment", "list"]).await;
    assert_eq!(listed, serde_json::json!([]), "nothing was created");
}
