//! `ballast dead-letters`: what a deployment's dead-letter queue holds and why, and, once
//! the cause is fixed, each letter sent back to the function it failed in: an event of the
//! events queue to the interruption function (as a one-message batch: the queue itself
//! takes messages from the stack's rules only), a failed asynchronous invocation (its
//! on-failure record) to its function again. Each is invoked and waited for, so a letter
//! is deleted only once its function handled it.
//!
//! Anyone who may send to the dead-letter queue could name any function in a letter, so a
//! replay invokes only this stack's own functions (`ballast-CLUSTER-{interruption,
//! schedule,cluster-events}`), in the queue's own account and the client's region, by name;
//! a letter naming another is kept and reported, never sent.

use aws_sdk_sqs::types::MessageSystemAttributeName;
use ballast_core::function::Function;
use ballast_core::ports::{ErrorKind, PortError};
use serde::Serialize;
use serde_json::Value;

use ballast_aws::classify;
use ballast_aws::dead_letters::queue_url;

/// How long a letter read stays hidden from other readers: a listing shows them again at
/// once; a replay reads one at a time and waits for its function, up to Lambda's longest
/// timeout, then shows again those its functions did not handle.
pub const LISTED_FOR: std::time::Duration = std::time::Duration::from_secs(300);
/// How long a letter being sent back stays hidden: Lambda's longest timeout.
pub const REPLAYED_FOR: std::time::Duration = std::time::Duration::from_secs(900);

/// What a dead letter is, read from its body.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Letter {
    /// A message of the events queue the interruption function could not handle. `reason`
    /// is its `ballast-error`; none if the queue's redrive policy moved it there.
    Event {
        /// The event's id, if its body is an EventBridge envelope.
        id: Option<String>,
        /// The envelope's `source`, such as `aws.ec2`.
        source: Option<String>,
        /// The envelope's `detail-type`.
        detail_type: Option<String>,
        /// Why the function gave up on it (its `ballast-error`).
        reason: Option<String>,
    },
    /// A schedule or cluster-events invocation that failed after Lambda's retries, as its
    /// on-failure destination recorded it.
    FailedInvocation {
        /// The function, without a version qualifier: sent back, the current code runs it.
        function: String,
        /// Lambda's condition: `RetriesExhausted`, `EventAgeExceeded`.
        condition: String,
        /// The function's error, when it ran.
        error: Option<String>,
        /// The event it was invoked with.
        payload: Value,
    },
}

impl Letter {
    /// Reads a dead letter's body and its `ballast-error` attribute.
    pub fn read(body: &str, reason: Option<String>) -> Letter {
        let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let text = |v: &Value| v.as_str().map(str::to_string);
        if let (Some(function), Some(payload)) =
            (value.pointer("/requestContext/functionArn").and_then(Value::as_str), value.get("requestPayload"))
        {
            let error = value
                .pointer("/responsePayload/errorMessage")
                .and_then(text)
                .or_else(|| value.pointer("/responseContext/functionError").and_then(text));
            return Letter::FailedInvocation {
                function: unqualified(function).to_string(),
                condition: value.pointer("/requestContext/condition").and_then(text).unwrap_or_default(),
                error,
                payload: payload.clone(),
            };
        }
        Letter::Event {
            id: value.get("id").and_then(text),
            source: value.get("source").and_then(text),
            detail_type: value.get("detail-type").and_then(text),
            reason,
        }
    }

    /// One line: what it is and why it is here.
    pub fn describe(&self) -> String {
        match self {
            Letter::Event { id, source, detail_type, reason } => format!(
                "event {} / {} (id {}): {}",
                source.as_deref().unwrap_or("?"),
                detail_type.as_deref().unwrap_or("?"),
                id.as_deref().unwrap_or("?"),
                reason.as_deref().unwrap_or("no reason recorded (moved by the queue's redrive policy)")
            ),
            Letter::FailedInvocation { function, condition, error, payload } => format!(
                "invocation of {function} with {} ({condition}): {}",
                payload
                    .get("detail-type")
                    .or_else(|| payload.get("action"))
                    .and_then(Value::as_str)
                    .unwrap_or("an event"),
                error.as_deref().unwrap_or("no error recorded")
            ),
        }
    }
}

/// `arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]` without its qualifier.
fn unqualified(arn: &str) -> &str {
    match arn.match_indices(':').nth(6) {
        Some((at, _)) => &arn[..at],
        None => arn,
    }
}

/// A letter as received, with what it takes to delete or release it.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// SQS's id of the message in the dead-letter queue.
    pub message_id: String,
    #[serde(skip)]
    receipt_handle: String,
    #[serde(skip)]
    body: String,
    /// How many times the dead-letter queue delivered it.
    pub receives: u32,
    /// What the letter is, read from its body.
    pub letter: Letter,
}

/// The dead-letter queue of a deployment, and the function its events go back to.
pub struct DeadLetterQueue {
    sqs: aws_sdk_sqs::Client,
    lambda: aws_sdk_lambda::Client,
    url: String,
    interruption_function: String,
    /// The queue's account (from its URL) and the region of the clients: the stack's.
    account: String,
    region: String,
}

/// The functions of the stack whose interruption function is `interruption`
/// (`ballast-CLUSTER-interruption`, or its ARN): the three of `ballast-CLUSTER-`, by name,
/// or that one alone.
fn stack_functions(interruption: &str) -> Vec<String> {
    let interruption = unqualified(interruption).rsplit(':').next().unwrap_or_default();
    match interruption.strip_suffix(Function::Interruption.name()) {
        Some(prefix) if prefix.ends_with('-') => {
            Function::ALL.iter().map(|f| format!("{prefix}{}", f.name())).collect()
        }
        _ => vec![interruption.to_string()],
    }
}

/// The function a failed invocation's record names, as a bare name to invoke, if it is one
/// of `own` in `account` and `region`; otherwise why not.
fn own_function(arn: &str, own: &[String], account: &str, region: &str) -> Result<String, String> {
    let parts: Vec<&str> = unqualified(arn).split(':').collect();
    match parts.as_slice() {
        ["arn", _, "lambda", r, a, "function", name]
            if *r == region && *a == account && own.iter().any(|o| o == name) =>
        {
            Ok(name.to_string())
        }
        _ => Err(format!(
            "names {arn}, not one of this stack's functions ({} in account {account}, region {region}): not invoked",
            own.join(", ")
        )),
    }
}

/// A queue URL's account: `https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`.
fn url_account(url: &str) -> String {
    url.trim_end_matches('/').rsplit('/').nth(1).unwrap_or_default().to_string()
}

/// What became of a letter sent back.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum SentBack {
    /// Its function handled it (a failure no retry mends puts it in the dead-letter queue
    /// again, as a new letter with its reason); deleted here.
    Handled,
    /// Its function failed again, or rejects it: left in the queue (hidden until the
    /// caller releases it).
    StillFailing {
        /// The function's error, or why it rejects the event.
        why: String,
    },
}

/// What a replay did with one letter, as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    /// The letter as read.
    pub letter: DeadLetter,
    /// What became of it.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What a replay did with one letter.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Its function handled it; deleted.
    Handled,
    /// Its function failed again, or rejects it: kept.
    StillFailing {
        /// The function's error, or why it rejects the event.
        why: String,
    },
    /// Not sent back, or sent but not deleted: kept.
    NotSentBack {
        /// What stopped it: a function not the stack's own, a failed call.
        why: String,
    },
    /// The copy the interruption function dead-lettered, with its new reason, of an event
    /// it failed again for good earlier in this replay (it answers such a batch as
    /// handled): that earlier one counts as failed, this one is kept.
    FailedAgain,
}

/// A replay's count: letters handled (deleted) and kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReplayCount {
    /// Letters their functions handled, deleted.
    pub handled: usize,
    /// Letters left in the queue.
    pub kept: usize,
}

impl DeadLetterQueue {
    /// Over clients of the caller's making (tests add interceptors).
    pub async fn from_clients(
        sqs: aws_sdk_sqs::Client,
        lambda: aws_sdk_lambda::Client,
        name: &str,
        interruption_function: &str,
    ) -> Result<Self, PortError> {
        let url = queue_url(&sqs, name).await?;
        let account = url_account(&url);
        let region = lambda.config().region().map(|r| r.to_string()).unwrap_or_default();
        Ok(DeadLetterQueue {
            sqs,
            lambda,
            url,
            interruption_function: interruption_function.to_string(),
            account,
            region,
        })
    }

    /// The function `letter` would be sent back to (a bare name, in the stack's account and
    /// region), or why it will not be sent.
    pub fn target(&self, letter: &Letter) -> Result<String, String> {
        match letter {
            Letter::Event { .. } => Ok(self.interruption_function.clone()),
            Letter::FailedInvocation { function, .. } => {
                own_function(function, &stack_functions(&self.interruption_function), &self.account, &self.region)
            }
        }
    }

    /// Sends up to `max` letters back, one at a time, each hidden while its function runs;
    /// those not handled stay hidden until the end (so they are not read again), then
    /// are shown again. `each` hears of every letter as it is done.
    pub async fn replay(&self, max: usize, mut each: impl FnMut(&Replayed)) -> Result<ReplayCount, PortError> {
        let mut count = ReplayCount::default();
        let mut kept: Vec<DeadLetter> = Vec::new();
        let mut replayed: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        while count.handled + count.kept < max {
            let letter = match self.receive(1, REPLAYED_FOR).await {
                Ok(mut one) if !one.is_empty() => one.remove(0),
                Ok(_) => break,
                Err(e) => {
                    let _ = self.release(&kept).await;
                    return Err(e);
                }
            };
            let outcome = if replayed.contains(&letter.body) {
                count.handled -= 1;
                Outcome::FailedAgain
            } else {
                match self.send_back(&letter).await {
                    Ok(SentBack::Handled) => Outcome::Handled,
                    Ok(SentBack::StillFailing { why }) => Outcome::StillFailing { why },
                    Err(e) => Outcome::NotSentBack { why: e.to_string() },
                }
            };
            if outcome == Outcome::Handled {
                count.handled += 1;
                replayed.insert(letter.body.clone());
            } else {
                count.kept += 1;
            }
            let done = Replayed { letter, outcome };
            each(&done);
            if done.outcome != Outcome::Handled {
                kept.push(done.letter);
            }
        }
        self.release(&kept).await?;
        Ok(count)
    }

    /// The queue by name (`ballast-CLUSTER-events-dlq`), and the interruption function
    /// (`ballast-CLUSTER-interruption`) its events go back to.
    pub async fn open(
        conf: &aws_config::SdkConfig,
        name: &str,
        interruption_function: &str,
    ) -> Result<Self, PortError> {
        Self::from_clients(
            aws_sdk_sqs::Client::new(conf),
            aws_sdk_lambda::Client::new(conf),
            name,
            interruption_function,
        )
        .await
    }

    /// Receives up to `max` letters, hidden from other readers for `hidden_for`.
    pub async fn receive(&self, max: usize, hidden_for: std::time::Duration) -> Result<Vec<DeadLetter>, PortError> {
        let hidden_for = i32::try_from(hidden_for.as_secs()).unwrap_or(i32::MAX);
        let mut letters: Vec<DeadLetter> = Vec::new();
        while letters.len() < max {
            let out = self
                .sqs
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(i32::try_from((max - letters.len()).min(10)).unwrap_or(10))
                .visibility_timeout(hidden_for)
                .wait_time_seconds(1)
                .message_attribute_names("ballast-error")
                .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                .send()
                .await;
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    // Those read so far are not left hidden for minutes.
                    let _ = self.release(&letters).await;
                    return Err(classify("ReceiveMessage", e));
                }
            };
            let batch = out.messages();
            if batch.is_empty() {
                break;
            }
            for m in batch {
                let body = m.body().unwrap_or_default().to_string();
                let reason = m
                    .message_attributes()
                    .and_then(|a| a.get("ballast-error"))
                    .and_then(|v| v.string_value())
                    .map(str::to_string);
                let receives = m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1);
                letters.push(DeadLetter {
                    message_id: m.message_id().unwrap_or_default().to_string(),
                    receipt_handle: m.receipt_handle().unwrap_or_default().to_string(),
                    letter: Letter::read(&body, reason),
                    body,
                    receives,
                });
            }
        }
        Ok(letters)
    }

    /// Shows letters to other readers again, untouched. Every one is tried; the first
    /// failure is returned (those left hidden show again once their time is up).
    pub async fn release(&self, letters: &[DeadLetter]) -> Result<(), PortError> {
        let mut first_error = None;
        for l in letters {
            let shown = self
                .sqs
                .change_message_visibility()
                .queue_url(&self.url)
                .receipt_handle(&l.receipt_handle)
                .visibility_timeout(0)
                .send()
                .await;
            if let Err(e) = shown {
                first_error.get_or_insert(classify("ChangeMessageVisibility", e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Invokes the letter's function with its event and waits for the answer: handled, it
    /// is deleted here. One failing again (or not sent) stays hidden until released, so
    /// that the rest of a replay does not read it again. The interruption function puts an
    /// event that fails for good back in the queue itself, with its new reason, and answers
    /// as handled: the replay meets that copy as a new letter with the same body.
    pub async fn send_back(&self, letter: &DeadLetter) -> Result<SentBack, PortError> {
        let sent = self.invoke(letter).await?;
        if sent == SentBack::Handled {
            self.sqs
                .delete_message()
                .queue_url(&self.url)
                .receipt_handle(&letter.receipt_handle)
                .send()
                .await
                .map_err(|e| {
                    let mut e = classify("DeleteMessage", e);
                    e.message =
                        format!("handled by its function, but not deleted (a replay sends it again): {}", e.message);
                    e
                })?;
        }
        Ok(sent)
    }

    async fn invoke(&self, letter: &DeadLetter) -> Result<SentBack, PortError> {
        let target = self.target(&letter.letter).map_err(|why| PortError::new(ErrorKind::Permanent, "Invoke", why))?;
        let function = target.as_str();
        let payload = match &letter.letter {
            // As the queue would deliver it: a batch of one message.
            Letter::Event { .. } => serde_json::json!({ "Records": [{
                "messageId": letter.message_id,
                "body": letter.body,
                "eventSource": "aws:sqs",
            }] }),
            Letter::FailedInvocation { payload, .. } => payload.clone(),
        };
        let bytes =
            serde_json::to_vec(&payload).map_err(|e| PortError::new(ErrorKind::Permanent, "Invoke", e.to_string()))?;
        let out = self
            .lambda
            .invoke()
            .function_name(function)
            .invocation_type(aws_sdk_lambda::types::InvocationType::RequestResponse)
            .payload(aws_smithy_types::Blob::new(bytes))
            .send()
            .await
            .map_err(|e| classify("Invoke", e))?;
        let answer = out.payload().map(|p| String::from_utf8_lossy(p.as_ref()).into_owned()).unwrap_or_default();
        if let Some(error) = out.function_error() {
            return Ok(SentBack::StillFailing { why: format!("{function} failed ({error}): {answer}") });
        }
        // The interruption function names the messages a retry may mend.
        let retry = serde_json::from_str::<Value>(&answer)
            .ok()
            .and_then(|a| a.get("batchItemFailures").and_then(Value::as_array).map(|f| !f.is_empty()))
            .unwrap_or(false);
        if retry {
            return Ok(SentBack::StillFailing { why: format!("{function} asks for a retry (its log says why)") });
        }
        // A schedule or cluster-events function answers an event it rejects with success
        // (its retries would not mend it): kept here, with why.
        let rejected = serde_json::from_str::<Value>(&answer)
            .ok()
            .and_then(|a| a.get("invalid").and_then(Value::as_array).filter(|i| !i.is_empty()).cloned());
        if let Some(rejected) = rejected {
            let why: Vec<String> = rejected.iter().map(|r| r.as_str().unwrap_or_default().to_string()).collect();
            return Ok(SentBack::StillFailing { why: format!("{function} rejects it: {}", why.join("; ")) });
        }
        Ok(SentBack::Handled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/dead-letters").join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn an_on_failure_record_is_an_invocation_to_send_back_to_its_function() {
        // The record Lambda's on-failure destination writes (AWS's documented example,
        // with a schedule tick as its event).
        let Letter::FailedInvocation { function, condition, error, payload } =
            Letter::read(&fixture("on-failure-record.json"), None)
        else {
            panic!("not an invocation")
        };
        assert_eq!(function, "arn:aws:lambda:eu-west-1:123456789012:function:ballast-prod-eks-schedule");
        assert_eq!(condition, "RetriesExhausted");
        assert_eq!(
            error.as_deref(),
            Some("RequestId: e4b46cbf-b738-xmpl-8880-a18cdf61200e Process exited before completing request")
        );
        assert_eq!(payload["detail-type"], "Scheduled Event");
    }

    #[test]
    fn an_event_of_the_queue_says_why_or_that_no_reason_was_recorded() {
        let body = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/spot-interruption-terminate.json"),
        )
        .unwrap();
        let with = Letter::read(&body, Some("pool general: AccessDenied".into()));
        assert_eq!(
            with.describe(),
            "event aws.ec2 / EC2 Spot Instance Interruption Warning (id 7f0c2a1e-5b4d-4c3a-9e8f-000000000000): pool \
             general: AccessDenied"
        );
        let without = Letter::read(&body, None);
        assert!(without.describe().ends_with("no reason recorded (moved by the queue's redrive policy)"));
        // Not JSON at all (a malformed message the function dead-lettered): still listed.
        assert!(matches!(Letter::read("{\"version\":", Some("malformed".into())), Letter::Event { id: None, .. }));
    }

    #[test]
    fn only_the_stacks_own_functions_in_its_account_and_region_are_invoked() {
        let own = stack_functions("ballast-prod-eks-interruption");
        assert_eq!(
            own,
            ["ballast-prod-eks-interruption", "ballast-prod-eks-schedule", "ballast-prod-eks-cluster-events"]
        );
        let check = |arn: &str| own_function(arn, &own, "123456789012", "eu-west-1");
        let arn = "arn:aws:lambda:eu-west-1:123456789012:function:ballast-prod-eks-schedule";
        assert_eq!(check(arn).as_deref(), Ok("ballast-prod-eks-schedule"));
        assert_eq!(check(&format!("{arn}:$LATEST")).as_deref(), Ok("ballast-prod-eks-schedule"));
        for foreign in [
            "arn:aws:lambda:eu-west-1:123456789012:function:delete-everything",
            "arn:aws:lambda:eu-west-1:123456789012:function:ballast-other-schedule",
            "arn:aws:lambda:eu-west-1:999999999999:function:ballast-prod-eks-schedule",
            "arn:aws:lambda:us-east-1:123456789012:function:ballast-prod-eks-schedule",
            "ballast-prod-eks-schedule",
        ] {
            let why = check(foreign).unwrap_err();
            assert!(why.contains("not one of this stack's functions") && why.contains(foreign), "{why}");
        }
        // Given by ARN, the same names.
        assert_eq!(
            stack_functions("arn:aws:lambda:eu-west-1:123456789012:function:ballast-prod-eks-interruption"),
            own
        );
        // A name not of the convention: that function alone.
        assert_eq!(stack_functions("my-interrupts"), ["my-interrupts"]);
        assert_eq!(
            url_account("https://sqs.eu-west-1.amazonaws.com/123456789012/ballast-prod-eks-events-dlq"),
            "123456789012"
        );
    }

    #[test]
    fn a_qualified_function_is_sent_back_to_its_current_code() {
        assert_eq!(
            unqualified("arn:aws:lambda:eu-west-1:1:function:f:$LATEST"),
            "arn:aws:lambda:eu-west-1:1:function:f"
        );
        assert_eq!(unqualified("arn:aws:lambda:eu-west-1:1:function:f"), "arn:aws:lambda:eu-west-1:1:function:f");
    }
}
