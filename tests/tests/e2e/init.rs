//! `cordon init` in a project directory: a cordon.toml Cordon loads, install commands that
//! work when run as printed from the project (where that cordon.toml is the config in use, out
//! of reach of every grant), the secrets a grant would expose and the files left out named, and
//! nothing overwritten or granted that should not be.

use cordon_tests::TestHome;

#[test]
fn init_writes_a_config_and_installs_that_work_as_printed() {
    let home = TestHome::new();
    let project = home.scratch("project");
    for dir in ["docs", "data", "scratch"] {
        std::fs::create_dir_all(project.join(dir)).unwrap();
    }
    std::fs::write(
        project.join("docs/notes.md"),
        "# Notes\nthe project's notes\n",
    )
    .unwrap();
    std::fs::write(project.join("data/shop.db"), "").unwrap();
    std::fs::write(project.join("data/.env"), "API_KEY=do-not-leak\n").unwrap();
    std::fs::write(project.join("README.md"), "top\n").unwrap();
    let dir = project.canonicalize().unwrap().display().to_string();

    let run = home.cordon_in(&project, &["init"]).ok().stdout_has(&[
        "Wrote ",
        "cordon.toml",
        "data/.env usually holds secrets",
        "the files at the top of the project (README.md) stay out of reach",
        &format!(
            "cordon plugin install files --grant fs:{dir}/data:/project/data:ro --grant \
             fs:{dir}/docs:/project/docs:ro"
        ),
        &format!("cordon plugin install sql --grant fs:{dir}/data:/project/data:ro"),
        &format!("cordon grant files fs:{dir}/scratch:/project/scratch:rw"),
    ]);
    let written = std::fs::read_to_string(project.join("cordon.toml")).unwrap();
    assert!(written.contains("[approval.tools]"), "{written}");

    // Nothing is overwritten unasked.
    home.cordon_in(&project, &["init"])
        .code(2)
        .stderr_has(&["exists already", "--force"]);
    std::fs::write(project.join("cordon.toml"), "# mine\n").unwrap();
    home.cordon_in(&project, &["init", "--force"]).ok();
    assert!(
        !std::fs::read_to_string(project.join("cordon.toml"))
            .unwrap()
            .contains("# mine")
    );

    // The commands work as printed, run where the user is: in the project.
    for line in run
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("cordon "))
    {
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        home.cordon_in(&project, &words).ok();
    }
    home.cordon(&["call", "read_file", r#"{"path": "/project/docs/notes.md"}"#])
        .ok()
        .stdout_has(&["the project's notes"]);
    // The config it wrote is the one in use there, and in order.
    home.cordon_in(&project, &["doctor", "--offline"])
        .ok()
        .stdout_has(&["ok    config: ", "cordon.toml"]);

    // The home itself is no project.
    home.cordon_in(&home.path(), &["init"])
        .code(2)
        .stderr_has(&["no tool may be granted it"]);
    assert!(!home.path().join("cordon.toml").exists());
}
