// "Add a target": which agent a device needs (from its `uname -m`), how to get it there and how
// to start it in each of its three modes, with the binaries this collector can hand out.
import { $, api, esc } from './util.js';

// uname -m -> the agent built for it (dist/perfwire-agent-linux-<arch>).
export function agentArch(machine) {
  const m = machine.trim().toLowerCase();
  if (m === 'aarch64' || m === 'arm64') return 'aarch64';
  if (m === 'armv7l' || m === 'armv8l' || m === 'armv7' || m === 'armhf') return 'armv7';
  if (m === 'x86_64' || m === 'amd64') return 'x86_64';
  if (m === 's390x') return 's390x';
  return null;
}

let binaries = [];
let status = {};

const loopback = (h) => h === 'localhost' || h === '::1' || h === '[::1]' || /^127\./.test(h);

function commands(arch) {
  const file = `perfwire-agent-linux-${arch}`;
  const b = binaries.find((x) => x.arch === arch);
  const agentPort = (status.agent_listener || ':9999').split(':').pop();
  const collector = loopback(location.hostname) ? 'COLLECTOR' : location.hostname;
  const fetchCmd = loopback(location.hostname)
    ? `# on this machine: fetch it, then copy it over\ncurl -fo ${file} ${location.origin}/api/agent-binaries/${arch}\nscp ${file} root@DEVICE:/tmp/perfwire-agent`
    : `# on the device\ncurl -fo /tmp/perfwire-agent ${location.origin}/api/agent-binaries/${arch}`;
  // This collector asks agents that dial in for its enrollment token (kept in a file here).
  const enroll = status.enrollment ? 'PERFWIRE_ENROLL_TOKEN=TOKEN ' : '';
  const enrollNote = status.enrollment ? ` (TOKEN: the enrollment token in ${status.enrollment_file} on this machine)` : '';
  const block = (title, text) => `<p>${title}</p><pre class="cmd">${esc(text)}</pre><button data-copy>copy</button>`;
  return block('1. Get it onto the device', fetchCmd) +
    block('2. Check it and make it executable', `cd /tmp && echo "${b?.sha256 || 'SHA256'}  perfwire-agent" | sha256sum -c && chmod +x perfwire-agent`) +
    block(`3. Start it: stream to this collector (the device reaches it)${esc(enrollNote)}`, `${enroll}/tmp/perfwire-agent --server ${collector}:${agentPort} --pid PID`) +
    block('… or wait for this collector to dial in (Live Debug), behind NAT use ssh -R', '/tmp/perfwire-agent --listen --port 9999   # prints a pairing code') +
    block('… or record on the device and import the file on the Sessions tab', '/tmp/perfwire-agent --output /tmp/profile.txt --pid PID --rounds 3');
}

function show() {
  const machine = $('#at-machine').value;
  const arch = machine ? agentArch(machine) : binaries[0]?.arch;
  const built = arch && binaries.some((b) => b.arch === arch);
  $('#at-file').textContent = !machine ? '' : built ? `→ perfwire-agent-linux-${arch}` : `not built for ${machine}${arch ? ` (${arch}): run scripts/build-agents.sh ${arch}` : ''}; agents here: ${binaries.map((b) => b.arch).join(', ') || 'none'}. A device with python3 can run the Python agent instead: ${binaries.some((b) => b.arch === 'python') ? `curl -fo perfwire_agent.py ${location.origin}/api/agent-binaries/python` : 'copy src/agent/python/perfwire_agent.py'} and start it with the same flags`;
  $('#at-file').className = !machine || built ? 'muted' : 'warn';
  $('#at-commands').innerHTML = built ? commands(arch) : '';
}

export async function renderAgentHelp() {
  [binaries, status] = await Promise.all([api('/api/agent-binaries').then((r) => r.binaries), api('/api/status')]);
  $('#agent-binaries tbody').innerHTML = binaries.map((b) => `<tr><td>${esc(b.arch)}</td>
    <td><a href="${esc(b.download)}" download>${esc(b.file)}</a></td><td>${(b.size / 1048576).toFixed(1)} MiB</td><td class="muted sha">${esc(b.sha256)}</td></tr>`).join('');
  $('#no-agent-binaries').hidden = binaries.length > 0;
  show();
}

export function initAgentHelp() {
  $('#at-machine').addEventListener('input', show);
  $('#add-target').addEventListener('click', (e) => {
    const b = e.target.closest('button[data-copy]');
    if (b) navigator.clipboard?.writeText(b.previousElementSibling.textContent).then(() => { b.textContent = 'copied'; }, () => {});
  });
}
