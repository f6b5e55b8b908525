// A token pane (gr.HTML js_on_load: `element`, `props` and `watch` are Gradio's). The pane's value
// is its token spans, escaped by the server (app/render.py); a live run only ever adds spans at the
// end, so only the new ones are parsed and added, instead of the whole pane on every frame. Any
// other change (a new run, hiding rejected tokens) redraws the pane.
// The pane also keeps its newest tokens in view as it grows, unless the reader scrolled up in it.
const pane = element.querySelector('.tokens');
let shown = '';
let follow = true;
const toEnd = () => { if (follow) pane.scrollTop = pane.scrollHeight; };
pane.addEventListener('scroll', () => {
  follow = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 24;
});
const draw = () => {
  const html = props.value || '';
  if (shown && html.startsWith(shown)) {
    pane.insertAdjacentHTML('beforeend', html.slice(shown.length));
  } else {
    pane.innerHTML = html;
  }
  shown = html;
  toEnd();
};
draw();
watch('value', draw);
// The lecture-hall view and the theme re-flow the pane (a class on <body>): follow again.
// After the next layout: the new class changes the pane's size only then.
new MutationObserver(() => requestAnimationFrame(toEnd)).observe(document.body, {attributes: true, attributeFilter: ['class']});
