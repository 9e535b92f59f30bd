//! The `memopt` command (built in its own issue).

fn main() {
    eprintln!("memopt: not built yet");
    std::process::exit(2);
}
