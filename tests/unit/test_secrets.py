"""Secret-looking is decided by name words, by value forms and by what the spec declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.common.masking import Redactor, looks_secret, mask_env, redact, secret_arguments
from launcher.common.secret_names import MASK, is_secret
from launcher.common.token_forms import TOKEN_FORMS, TokenForm

PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n"
SECRETS = {
    "DB_PASS": "hunter2-db",
    "SNOWFLAKE_PWD": "snowy-pwd-1",
    "GITHUB_PAT": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "ENCRYPTION_KEY_B64": "c2VjcmV0LWtleS1iNjQ=",
    "GCP_SA_JSON": '{"type": "service_account", "private_key": "' + PEM.replace("\n", "\\n") + '"}',
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4==;",
    "SLACK_URL": "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
    "HF_TOKEN": "hf_" + "abcdefghijklmnopqrstuvwxyz12",
    "OPENAI_API_KEY": "sk-" + "proj-ABCDEFGHIJKLMNOPQRSTUVWX",
    "AWS_ACCESS_KEY_ID": "AKIA" + "ABCDEFGHIJKLMNOP",
    "dbPassword": "camel-case-pw",
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_kind_is_masked_in_env(name: str) -> None:
    assert MASK in mask_env({name: SECRETS[name]})[name]
    assert SECRETS[name] not in Redactor.for_values([SECRETS], []).text(f"log line with {SECRETS[name]} in it")


@pytest.mark.parametrize(
    "name", ["TOKENIZERS_PARALLELISM", "KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "SSH_AUTH_SOCK", "PASSTHROUGH"]
)
def test_known_non_secrets_are_shown(name: str) -> None:
    assert not is_secret(name)


def test_declared_names_are_secret() -> None:
    assert not is_secret("MY_THING") and is_secret("MY_THING", ["MY_THING"])
    assert Redactor.for_values([{"MY_THING": "value-123"}], [], ["MY_THING"]).text("x value-123 y") == f"x {MASK} y"


def test_values_are_secret_by_their_form() -> None:
    for value in (PEM, SECRETS["GITHUB_PAT"], SECRETS["JWT"], "Authorization: Bearer abcdef123456", "s3://u:pw@h/b"):
        assert looks_secret(value), value
    assert not looks_secret("runs/example/checkpoints") and not looks_secret("gs://bucket/run")


def test_secret_arguments_in_a_command_line() -> None:
    argv = ["python", "train.py", "--token=hf_abcdefghijklmnopqrstuvwxyz12", "--api-key", "k-123456", "--lr", "0.1"]
    assert secret_arguments(argv) == ["hf_abcdefghijklmnopqrstuvwxyz12", "k-123456"]
    shown = Redactor.for_values([], [argv]).argv(argv)
    assert shown == ["python", "train.py", f"--token={MASK}", "--api-key", MASK, "--lr", "0.1"]


def test_secret_overrides_and_colon_flags_in_a_command_line() -> None:
    argv = ["train.py", "TOKEN=abcd1234", "db.password=pw-5678", "++auth.key=k-91011", "--db-password:pw-1213"]
    assert secret_arguments(argv) == ["abcd1234", "pw-5678", "k-91011", "pw-1213"]
    assert secret_arguments(["train.py", "lr=0.1", "model.layers=4", "PWD=/tmp", "--device:0"]) == []
    assert secret_arguments(["train.py", "MY_THING=value-123"], ["MY_THING"]) == ["value-123"]


def test_a_pem_key_is_masked_whole_even_split_over_lines() -> None:
    redactor = Redactor.for_values([{"SA": PEM}], [])
    out = redactor.text("start\n" + PEM + "end")
    assert "MIIEvQ" not in out and out.startswith("start\n") and out.endswith("end")


def test_data_is_masked_by_key_and_value() -> None:
    redactor = Redactor.for_values([{"DB_PASS": "hunter2-db"}], [])
    data = {"env": {"DB_PASS": "hunter2-db", "OTHER": "x"}, "message": "login hunter2-db failed", "n": 3}
    assert redactor.data(data) == {"env": {"DB_PASS": MASK, "OTHER": "x"}, "message": f"login {MASK} failed", "n": 3}


def test_a_validation_error_never_echoes_a_secret() -> None:
    from launcher.common.errors import SpecError
    from launcher.spec.load import parse_spec

    base = {"name": "a", "hosts": [{"address": "localhost", "workers": 1}]}
    for env in ({"DB_PASS": "hunter2-db\n"}, {"NOTE": SECRETS["HF_TOKEN"] + "\n"}, {"DB_PASS": "x", "DB_PASS ": "y"}):
        with pytest.raises(SpecError) as caught:
            parse_spec({**base, "env": env})
        assert "hunter2" not in str(caught.value) and "hf_" not in str(caught.value), caught.value
    with pytest.raises(SpecError) as caught:
        parse_spec({**base, "env": {"A": "1"}, "checkpoint_dir": "", "python": SECRETS["GITHUB_PAT"] + "\t"})
    assert "ghp_" not in str(caught.value)


def test_names_run_together_and_declared_flags_with_hyphens_are_secret() -> None:
    from launcher.common.secret_names import is_secret

    for name in ("PGPASSWORD", "PGPASS", "DBPASS", "APITOKEN", "HFTOKEN", "SSHKEY", "HTPASSWD"):
        assert is_secret(name), name
    for name in ("TOKENIZERS_PARALLELISM", "KEYRING_BACKEND", "PYTHONPATH", "NUM_WORKERS", "HF_HOME"):
        assert not is_secret(name), name
    assert is_secret("api_thing", ["api-thing"]) and is_secret("API-THING", ["api_thing"])


def test_a_secret_printed_through_repr_or_json_is_masked_too() -> None:
    import json

    from launcher.common.masking import Redactor

    value = "q'uo\\te\"Pass1"
    redactor = Redactor([value])
    for printed in (repr({"W": value}), json.dumps({"W": value}), str([value])):
        assert "uo" not in redactor.text(printed), printed


def test_authorization_headers_and_sas_are_masked() -> None:
    from launcher.common.masking import redact

    text = "BEARER abcdefgh12345678 bearer abcdefgh12345678 Basic dXNlcjpwYXNzd29yZA== SharedAccessSignature=sv=1&sig=x"
    assert "abcdefgh" not in redact(text) and "dXNlcj" not in redact(text) and "sig=x" not in redact(text)


def test_a_private_key_printed_line_by_line_is_masked_in_the_log_and_on_the_console(tmp_path) -> None:
    from launcher.common.masking import PemLines
    from launcher.transport.session import RedactedLog

    key = [
        "-----BEGIN RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMx",
        "H2Mo4lgOEePzNm0tRgeLezV6ffAt0",
        "-----END RSA PRIVATE KEY-----",
    ]
    path = tmp_path / "worker-0.log"
    log = RedactedLog(lambda: open(path, "wb"))
    for line in ["before", *key, "after"]:
        log.write((line + "\n").encode())  # one line per write, as a script printing with flush does
    log.close()
    written = path.read_text()
    assert "MIIEow" not in written and "H2Mo4" not in written and "before" in written and "after" in written
    console = PemLines()
    shown = [console.line(line) for line in ["before", *key, "after"]]
    assert shown[2:4] == ["****", "****"] and shown[-1] == "after"


def test_url_passwords_holding_a_slash_or_an_at_sign_are_masked_whole() -> None:
    from launcher.common.masking import redact

    assert redact("https://user:pa/ss@host/p") == "https://user:****@host/p"
    assert redact("https://u:p@ss@host") == "https://u:****@host"
    assert redact("see https://host:8080/path ok") == "see https://host:8080/path ok"


def test_a_declared_secret_too_short_to_mask_and_a_secret_that_is_no_name_are_refused_by_field() -> None:
    from launcher.common.errors import SpecError
    from launcher.spec.load import parse_spec

    spec = {
        "name": "a",
        "hosts": [{"address": "localhost", "workers": 1, "env": {"MY_PIN": "12"}}],
        "env": {"DB_PASS": "xy", "USE_TOKEN": "1", "LONG_ENOUGH": "abcd"},
        "secrets": ["db_pass", "my-pin", "LONG_ENOUGH", "bad name!"],
    }
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    fields = sorted(p.path for p in caught.value.problems)
    assert fields == ["$.env.DB_PASS", "$.hosts[0].env.MY_PIN", "$.secrets[3]"], caught.value
    assert "xy" not in str(caught.value) and "12" not in str(caught.value).replace("$.", "")
    parse_spec({**spec, "env": {"USE_TOKEN": "1"}, "hosts": [{"address": "localhost", "workers": 1}], "secrets": []})


def test_a_secret_exported_in_the_launchers_shell_is_masked_as_the_spec_s_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from launcher.spec.load import parse_spec
    from launcher.spec.masked import redactor_of

    monkeypatch.setenv("DB_PASS", "hunter2-from-the-shell")
    spec = parse_spec({"name": "a", "hosts": [{"address": "localhost", "workers": 1}]})
    shown = redactor_of(spec).text("it is 'hunter2-from-the-shell' in /work/dir")
    assert shown == f"it is '{MASK}' in /work/dir"  # PWD is a directory, not a password


def test_a_spec_secret_on_a_command_line_or_in_a_slurm_option_is_refused_by_field(tmp_path: Path) -> None:
    from launcher.cli.request import LaunchRequest, request_spec
    from launcher.common.errors import SpecError

    spec = {
        "name": "a",
        "run_root": str(tmp_path),
        "hosts": [{"address": "localhost", "workers": 1}],
        "env": {"DB_PASS": "hunter2-secret"},
        "training": {"kind": "command", "argv": ["sh", "-c", "echo hunter2-secret"]},
        "slurm": {
            "sbatch_options": ["--export=ALL,DB_PASS=hunter2-secret", "--comment=" + "hf_" + "a" * 30, "--qos=x"]
        },
    }
    with pytest.raises(SpecError) as caught:
        request_spec(LaunchRequest(spec))
    paths = sorted(p.path for p in caught.value.problems)
    assert paths == ["$.slurm.sbatch_options[0]", "$.slurm.sbatch_options[1]", "$.training.argv[2]"], caught.value
    assert "hunter2" not in str(caught.value)


def test_settings_about_secrets_are_not_secrets() -> None:
    """A flag is a secret by its last word: `--max-tokens 2048` and `sort_key=loss` would otherwise mask
    2048 and `loss` in every line the run prints."""
    argv = ["t.py", "sort_key=loss", "--max-tokens", "2048", "--tokenizer=bert", "--password-file", "pw.txt"]
    argv += ["--use_auth_token", "True", "--key-length=2048", "TOKENS=12"]
    assert secret_arguments(argv) == []
    env = {"MAX_TOKENS": "2048", "USE_AUTH_TOKEN": "True", "HF_TOKEN": "hf-value-1"}
    assert Redactor.for_values([env], []).text("step 2048 True hf-value-1") == f"step 2048 True {MASK}"


def test_secrets_in_the_other_spellings_of_a_command_line() -> None:
    argv = ["t.py", "--env=HF_TOKEN=abcdef9", "--password", "-Xy7secretpw", "--opts PASSWORD=hunter2abc", "-v"]
    assert secret_arguments(argv) == ["abcdef9", "-Xy7secretpw", "hunter2abc"]
    assert secret_arguments(["-c", "python3 train.py --token=inline2"]) == ["inline2"]  # bash -c '...'
    assert secret_arguments(["t.py", "--password", "--next", "--token", "-v"]) == []


def test_words_after_basic_or_bearer_in_a_sentence_are_not_credentials() -> None:
    from launcher.common.masking import redact

    prose = "Using basic tokenization; running basic augmentation; Bearer capacity exceeded"
    assert redact(prose) == prose
    assert redact("Authorization: Basic abc:def") == f"Authorization: Basic {MASK}"
    assert redact('{"authorization": "Bearer opaquetoken"}') == '{"authorization": "Bearer ' + MASK + '"}'


def test_a_key_flag_is_a_secret_unless_it_names_another_kind_of_key_or_token() -> None:
    argv = ["t.py", "--wandb-key", "wk_abc123", "--openai-key=sk9x", "--key", "abcd1234"]
    argv += ["--config", '{"db": {"password": "hunter2xyz"}, "lr": 1}']
    assert secret_arguments(argv) == ["wk_abc123", "sk9x", "abcd1234", "hunter2xyz"]
    settings = ["t.py", "--pad_token", "</s>", "--eos-token", "</s>", "--auth", "basic", "--monitor-key", "val_loss"]
    assert secret_arguments([*settings, "--auth-type", "bearer", "sort_key=loss"]) == []


def test_keras_names_after_basic_are_no_credentials() -> None:
    from launcher.common.masking import redact

    prose = "using basic Conv2DTranspose layers and a basic EfficientNetB0 model"
    assert redact(prose) == prose


def test_a_urls_query_parameters_are_printed_as_they_are() -> None:
    """A query parameter is not a secret by its name: only a token form in it is masked (an Azure SAS's `sig`)."""
    for url in (
        "https://h/api?access_token=abcd1234&page=2&sig=Zm9v%2Bbar&X-Amz-Signature=deadbeef00",
        "gs://bucket/run#secret=Frag99pw",
        "gs://bucket/run;password=Semi88pw",
    ):
        assert redact(f"GET {url} done") == f"GET {url} done" and not looks_secret(url)
        assert secret_arguments(["t.py", "--data", url]) == []
    sas = "https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sr=b&sig=" + "AbC%2Bdef123"
    assert redact(sas) == f"https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sr=b&sig={MASK}"
    assert secret_arguments(["t.py", sas]) == ["AbC%2Bdef123"]


def test_a_bearer_flag_is_a_secret_flag() -> None:
    assert secret_arguments(
        ["t.py", "--bearer", "opaquetok123", "--auth-bearer=xyz98765", "--auth-type", "bearer"]
    ) == [
        "opaquetok123",
        "xyz98765",
    ]


def test_a_secret_among_other_words_of_an_argument_is_masked_alone() -> None:
    argv = ["t.py", "--msg", "push with ghp_abcdefghijklmnopqrstuvwxyz12 now", "--db", "postgres://u:pw5678ab@h/db"]
    argv += ["-H", "Authorization: Basic dXNlcjpwYXNz", "--cache", "redis://default:test@h:6379"]
    assert secret_arguments(argv) == ["ghp_abcdefghijklmnopqrstuvwxyz12", "pw5678ab"]  # the header: masked in place
    redactor = Redactor.for_values([{"REDIS_URL": "redis://default:test@h:6379"}], [argv])
    shown = redactor.argv(argv)
    assert shown[2] == f"push with {MASK} now" and shown[4] == f"postgres://u:{MASK}@h/db"
    assert shown[6] == f"Authorization: Basic {MASK}" and shown[8] == f"redis://default:{MASK}@h:6379"
    # a plain word as a URL's password is masked in its URL only: "latest" and "test" elsewhere stay
    assert redactor.text("latest test pw5678ab") == f"latest test {MASK}"


def test_json_in_a_flags_value_or_an_override_is_read_for_secrets() -> None:
    argv = ["t.py", '--cfg={"db": {"password": "Qw3rty-Zx9v"}}', 'opts={"api_key": "k-7781xyz"}']
    assert secret_arguments(argv) == ["Qw3rty-Zx9v", "k-7781xyz"]


@pytest.mark.parametrize(
    "line",
    [
        "X-Api-Key: abcd1234efgh",
        "[('Set-Cookie', 'sid=s3cr3t; Path=/')]",
        '{"headers": {"X-Auth-Token": "S3cr3t", "a": 1}}',
        "send: b'GET / HTTP/1.1\\r\\nCookie: session=abc123\\r\\nHost: x\\r\\n'",
        "Namespace(api_key='s3cr3t', batch_size=32)",
        "aws_session_token=FQoGZXs3cr3t",
        "password=hunter2xyz DB_PASS=hunter2xyz",  # a variable the launcher never saw
    ],
)
def test_credential_headers_cookies_and_names_in_free_text_are_printed_as_they_are(line: str) -> None:
    """A secret the launcher does not know, printed under a name of its own, is not masked: declare the
    name in the spec's `secrets`, or keep it out of the logs."""
    from launcher.common.masking import redact

    assert redact(line) == line


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        ("signature = " + "AB" * 32, "signature = ****"),
        (
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
            "SignedHeaders=host;x-amz-date, Signature=****",
        ),
        ('"signature": "' + "ab" * 32 + '"', '"signature": "****"'),
    ],
)
def test_an_aws_signature_is_masked_in_each_spelling(line: str, kept: str) -> None:
    from launcher.common.masking import redact

    assert kept in redact(line), redact(line)


@pytest.mark.parametrize(
    "line",
    ["Epoch 3: cookies eaten 5", "tokens: 512", "batch-key: 7", "monkey: 3", "keyboard=us", "KeyError: 'x'"],
)
def test_lines_that_only_resemble_a_credential_header_are_left_alone(line: str) -> None:
    from launcher.common.masking import redact

    assert redact(line) == line


def test_the_closed_core_masks_every_value_the_launcher_knows() -> None:
    """A declared secret's value as it is, through repr() or JSON and percent-decoded; an env value under a
    secret name; `--password X`; a URL's password; a PEM block: whatever they look like."""
    import json

    env = {"MY_THING": "plain%2Bword's", "DB_PASSWORD": "correct horse", "DATA": "s3://u:Plainpassword9@h/b"}
    argv = ["train.py", "--password", "battery staple"]
    redactor = Redactor.for_values([env], [argv], ["MY_THING"])
    printed = [repr({"x": "plain%2Bword's"}), json.dumps("plain%2Bword's"), "plain+word's", "plain%2Bword's"]
    printed += ["correct horse", "battery staple", "Plainpassword9", "s3://u:Plainpassword9@h/b", PEM]
    for line in printed:
        shown = redactor.text(f"start {line} end")
        assert shown.startswith("start ") and shown.endswith(" end") and MASK in shown, shown
        assert not any(word in shown for word in ("plain", "horse", "staple", "Plainpassword", "MIIEvQ")), shown
    assert redactor.env(env)["DB_PASSWORD"] == MASK and redactor.argv(argv)[2] == MASK


@pytest.mark.parametrize("form", TOKEN_FORMS, ids=[form.name for form in TOKEN_FORMS])
def test_each_token_form_masks_its_example_and_keeps_the_other(form: TokenForm) -> None:
    found = form.pattern.search(form.masks)
    assert found is not None, form.masks
    secret = found["secret"] if "secret" in form.pattern.groupindex else found.group()
    shown = Redactor().text(f"seen: {form.masks} here")
    assert MASK in shown and secret not in shown and shown.startswith("seen: ") and shown.endswith(" here"), shown
    assert looks_secret(form.masks), form.masks
    assert form.pattern.search(form.keeps) is None and Redactor().text(form.keeps) == form.keeps, form.keeps


def test_each_token_form_has_a_name_and_both_examples() -> None:
    assert len({form.name for form in TOKEN_FORMS}) == len(TOKEN_FORMS)
    for form in TOKEN_FORMS:
        assert form.name and form.masks and form.keeps and form.masks != form.keeps, form
